"""Portable checkpoints across torch.compile wrapping, and the compile/count helpers."""

from __future__ import annotations

from collections import OrderedDict

import pytest
import torch
from torch import nn

from skinet.checkpoints.state_dict import (
    compile_model,
    count_parameters,
    load_portable_state_dict,
    normalize_state_dict_keys,
)
from skinet.models.unet2d import UNet2D


def build_model(seed: int) -> UNet2D:
    torch.manual_seed(seed)
    model = UNet2D(out_channels_layer1=4, number_of_layers=3, merge_residual_mode="attention_gate")
    # Perturb the BN running stats so that buffers matter in the comparison.
    model.train()(torch.randn(2, 3, 32, 32))
    return model.eval()


def test_normalize_strips_the_segment_anywhere() -> None:
    state = OrderedDict(
        [("_orig_mod.encoder.0.w", 1), ("model._orig_mod.head.bias", 2), ("plain.key", 3)]
    )
    state._metadata = OrderedDict([("", {}), ("_orig_mod", {"version": 1})])  # type: ignore[attr-defined]
    plain = normalize_state_dict_keys(state)
    assert list(plain) == ["encoder.0.w", "model.head.bias", "plain.key"]
    assert list(plain._metadata) == [""]  # type: ignore[attr-defined]


def test_normalize_rejects_colliding_keys() -> None:
    with pytest.raises(ValueError, match="collide"):
        normalize_state_dict_keys({"_orig_mod.head.bias": 1, "head.bias": 2})


def test_compiled_to_plain_and_back_give_identical_outputs() -> None:
    images = torch.randn(2, 3, 37, 45)
    compiled = compile_model(build_model(seed=1), backend="eager").eval()
    assert all(key.startswith("_orig_mod.") for key in compiled.state_dict())
    with torch.no_grad():
        expected = compiled(images)

    plain = build_model(seed=2)
    load_portable_state_dict(plain, compiled.state_dict())
    with torch.no_grad():
        torch.testing.assert_close(plain(images), expected, rtol=0, atol=0)

    recompiled = compile_model(build_model(seed=3), backend="eager").eval()
    load_portable_state_dict(recompiled, plain.state_dict())
    with torch.no_grad():
        torch.testing.assert_close(recompiled(images), expected, rtol=0, atol=0)


def test_loads_into_a_wrapper_holding_a_compiled_submodule() -> None:
    """A LightningModule-like parent whose ``model`` is compiled keeps its own key naming."""
    source = nn.Module()
    source.model = build_model(seed=4)
    target = nn.Module()
    target.model = compile_model(build_model(seed=5), backend="eager")
    result = load_portable_state_dict(target, source.state_dict())
    assert not result.missing_keys and not result.unexpected_keys
    torch.testing.assert_close(target.model._orig_mod.head.weight, source.model.head.weight)


def test_strict_load_reports_mismatch() -> None:
    with pytest.raises(RuntimeError, match="Missing key"):
        load_portable_state_dict(build_model(seed=6), {"_orig_mod.head.bias": torch.zeros(1)})


def test_count_parameters_respects_trainable_only() -> None:
    model = nn.Linear(3, 2)
    model.bias.requires_grad_(False)
    assert count_parameters(model) == 8
    assert count_parameters(model, trainable_only=True) == 6
