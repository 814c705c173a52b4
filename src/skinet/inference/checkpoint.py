"""Loading SkiNet Lightning checkpoints for inference, without executing pickled code.

A training checkpoint is a Lightning checkpoint whose ``state_dict`` keys start with ``model.``
(``model._orig_mod.`` after ``torch.compile``) plus ``checkpoint["skinet"]``: the resolved YAML
config and the validation-optimal threshold. Everything is read with
``torch.load(..., weights_only=True)``: tensors, containers and primitive types only, so a
checkpoint carrying a crafted pickle is refused instead of run.
"""

from __future__ import annotations

import pickle
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from skinet.config import ConfigError, ExperimentConfig, parse_config
from skinet.models import UNet2D, normalize_state_dict_keys

CHECKPOINT_KEY = "skinet"
"""Checkpoint entry written by ``LightningModel.on_save_checkpoint`` (same string as training)."""
MODEL_PREFIX = "model."
DEFAULT_THRESHOLD = 0.5


class CheckpointError(ValueError):
    """A checkpoint is missing, unsafe to unpickle, or not a SkiNet training checkpoint."""


@dataclass(frozen=True)
class SkinetCheckpoint:
    """What inference needs from a training checkpoint.

    Attributes:
        path: The file read.
        config: The resolved experiment config the model was trained with.
        state_dict: UNet2D weights, keys without the ``model.`` / ``_orig_mod.`` prefixes.
        val_optimal_threshold: Threshold chosen on the validation set (``None`` if never swept).
        threshold_used: Threshold the training run used last.
    """

    path: Path
    config: ExperimentConfig
    state_dict: dict[str, Tensor]
    val_optimal_threshold: float | None
    threshold_used: float | None

    @property
    def threshold(self) -> float:
        """``val_optimal_threshold``, else ``threshold_used``, else 0.5."""
        for value in (self.val_optimal_threshold, self.threshold_used):
            if value is not None:
                return float(value)
        return DEFAULT_THRESHOLD


def _safe_load(path: Path, map_location: str | torch.device) -> Any:
    if not zipfile.is_zipfile(path):
        # torch.save has written zip archives since torch 1.6; anything else (a text file, an
        # HTML error page, a truncated download) would otherwise surface as raw unpickler text.
        with path.open("rb") as handle:
            head = handle.read(16)
        raise CheckpointError(
            f"{path} is not a checkpoint: it is not a torch.save archive (first bytes {head!r}). "
            "Give a .ckpt written by `skinet train` (run folder, checkpoints/)."
        )
    try:
        return torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as error:
        # torch raises UnpicklingError for any global outside its weights-only allow-list.
        reason = str(error).strip().splitlines()
        detail = next((line for line in reason if "GLOBAL" in line or "Unsupported" in line), "")
        detail = f": {detail.strip()}" if detail else ""
        raise CheckpointError(
            f"refusing to load {path}: it contains Python objects that are not plain weights "
            f"(torch.load(weights_only=True) rejected it{detail}). "
            "SkiNet never unpickles arbitrary objects, because a crafted checkpoint can run code "
            "when loaded. Use a checkpoint written by `skinet train`."
        ) from None
    except (RuntimeError, EOFError, zipfile.BadZipFile, OSError) as error:
        if isinstance(error, FileNotFoundError):
            raise
        raise CheckpointError(f"cannot read checkpoint {path}: {error}") from None


def read_checkpoint_file(
    path: str | Path, map_location: str | torch.device = "cpu"
) -> dict[str, Any]:
    """The raw contents of a SkiNet training checkpoint, read with ``weights_only=True``.

    Raises:
        FileNotFoundError: ``path`` does not exist.
        CheckpointError: The file is not a checkpoint, holds non-weight objects, or lacks the
            ``skinet`` entry.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"checkpoint not found: {path}")
    raw = _safe_load(path, map_location)
    if not isinstance(raw, dict) or not isinstance(raw.get(CHECKPOINT_KEY), dict):
        raise CheckpointError(
            f"{path} is not a SkiNet checkpoint: it has no '{CHECKPOINT_KEY}' entry with the "
            "training config (write checkpoints with `skinet train`)"
        )
    return raw


def _float_or_none(value: Any) -> float | None:
    return None if value is None else float(value)


def load_checkpoint(path: str | Path, map_location: str | torch.device = "cpu") -> SkinetCheckpoint:
    """Read a SkiNet training checkpoint safely (``weights_only=True``).

    Raises:
        FileNotFoundError: ``path`` does not exist.
        CheckpointError: The file holds non-weight objects, is corrupt, or lacks the ``skinet``
            entry, the model weights or a valid config.
    """
    path = Path(path)
    raw = read_checkpoint_file(path, map_location)
    saved = raw[CHECKPOINT_KEY]
    if not isinstance(saved.get("config"), dict):
        raise CheckpointError(f"{path}: checkpoint['{CHECKPOINT_KEY}'] has no 'config' mapping")
    try:
        config = parse_config(saved["config"], f"{path} (checkpoint config)")
    except ConfigError as error:
        raise CheckpointError(str(error)) from None
    plain = normalize_state_dict_keys(raw.get("state_dict") or {})
    weights = {
        key.removeprefix(MODEL_PREFIX): value
        for key, value in plain.items()
        if key.startswith(MODEL_PREFIX)
    }
    if not weights:
        raise CheckpointError(f"{path}: no model weights (state_dict keys starting with 'model.')")
    return SkinetCheckpoint(
        path=path,
        config=config,
        state_dict=weights,
        val_optimal_threshold=_float_or_none(saved.get("val_optimal_threshold")),
        threshold_used=_float_or_none(saved.get("threshold_used")),
    )


def build_model(checkpoint: SkinetCheckpoint) -> UNet2D:
    """The trained :class:`UNet2D` in eval mode, on the CPU.

    Raises:
        CheckpointError: The weights do not match ``MODEL_CONFIG``, or the model is not binary.
    """
    model_cfg = checkpoint.config.model
    if model_cfg.num_output_classes != 1:
        raise CheckpointError(
            f"{checkpoint.path}: inference supports binary models only "
            f"(MODEL_CONFIG.num_output_classes is {model_cfg.num_output_classes})"
        )
    model = UNet2D(**model_cfg.model_dump())
    try:
        model.load_state_dict(checkpoint.state_dict, strict=True)
    except RuntimeError as error:
        raise CheckpointError(
            f"{checkpoint.path}: weights do not match MODEL_CONFIG: {error}"
        ) from None
    return model.eval()
