"""Checkpoints that load whether or not either side was wrapped by ``torch.compile``.

``torch.compile`` returns an ``OptimizedModule`` whose state dict keys carry an ``_orig_mod.``
segment (``model._orig_mod.encoder.0...`` inside a LightningModule). These helpers strip that
segment on the way in and map keys onto whatever naming the receiving module uses.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from typing import Any, cast

import torch
from torch import nn

COMPILE_SEGMENT = "_orig_mod"
"""Attribute under which ``torch.compile`` keeps the wrapped module."""


def _strip_compile_segment(key: str) -> str:
    # Dropping whole dotted segments also handles metadata keys such as "model._orig_mod".
    return ".".join(part for part in key.split(".") if part != COMPILE_SEGMENT)


def normalize_state_dict_keys(state_dict: Mapping[str, Any]) -> dict[str, Any]:
    """Return ``state_dict`` with every ``_orig_mod.`` segment removed from its keys.

    ``model._orig_mod.encoder.0.weight`` becomes ``model.encoder.0.weight``. The
    ``_metadata`` that ``load_state_dict`` uses for version upgrades is carried over.

    Raises:
        ValueError: If two keys become the same (a mix of compiled and plain keys).
    """
    normalized: OrderedDict[str, Any] = OrderedDict()
    for key, value in state_dict.items():
        plain = _strip_compile_segment(key)
        if plain in normalized:
            raise ValueError(f"state dict keys collide after removing '_orig_mod.': {plain!r}")
        normalized[plain] = value
    metadata = getattr(state_dict, "_metadata", None)
    if metadata is not None:
        normalized._metadata = OrderedDict(  # type: ignore[attr-defined]
            (_strip_compile_segment(key), value) for key, value in metadata.items()
        )
    return normalized


def load_portable_state_dict(
    module: nn.Module, state_dict: Mapping[str, Any], strict: bool = True
) -> Any:
    """Load ``state_dict`` from a compiled or plain model into a compiled or plain ``module``.

    Keys are normalised, then renamed to the receiving module's own keys, so this also works
    when ``module`` holds a compiled submodule (a LightningModule with a compiled ``model``).

    Returns:
        The ``(missing_keys, unexpected_keys)`` named tuple of ``load_state_dict``.
    """
    inner = getattr(module, COMPILE_SEGMENT, None)
    target = inner if isinstance(inner, nn.Module) else module
    return target.load_state_dict(match_state_dict_keys(target, state_dict), strict=strict)


def match_state_dict_keys(module: nn.Module, state_dict: Mapping[str, Any]) -> dict[str, Any]:
    """Rename ``state_dict`` keys (compiled or plain) to ``module``'s own, compiled or plain."""
    own_keys = {_strip_compile_segment(key): key for key in module.state_dict(keep_vars=True)}
    own_modules = {_strip_compile_segment(name): name for name, _ in module.named_modules()}
    plain = normalize_state_dict_keys(state_dict)
    renamed: OrderedDict[str, Any] = OrderedDict(
        (own_keys.get(key, key), value) for key, value in plain.items()
    )
    metadata = getattr(plain, "_metadata", None)
    if metadata is not None:
        renamed._metadata = OrderedDict(  # type: ignore[attr-defined]
            (own_modules.get(key, key), value) for key, value in metadata.items()
        )
    return renamed


def compile_model(model: nn.Module, backend: str = "inductor", **compile_kwargs: Any) -> nn.Module:
    """Wrap ``model`` with ``torch.compile(model, backend=backend, **compile_kwargs)``.

    ``backend="eager"`` traces with Dynamo but runs uncompiled: quick to start, and it still
    produces ``_orig_mod.`` keys, so checkpoints match those of a real compile.
    """
    return cast(nn.Module, torch.compile(model, backend=backend, **compile_kwargs))


def count_parameters(model: nn.Module, trainable_only: bool = False) -> int:
    """Return the number of parameters of ``model`` (only those requiring grad if asked)."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad or not trainable_only)
