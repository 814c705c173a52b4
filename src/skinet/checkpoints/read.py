"""Loading SkiNet Lightning checkpoints for inference, without executing pickled code.

A training checkpoint is a Lightning checkpoint whose ``state_dict`` keys start with ``model.``
(``model._orig_mod.`` after ``torch.compile``) plus ``checkpoint["skinet"]``: the resolved YAML
config and the validation-optimal threshold (:class:`skinet.checkpoints.format.CheckpointPayload`;
older formats are upgraded there, so old checkpoints predict as trained). Everything is read with
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

from skinet.checkpoints.format import CheckpointError, CheckpointPayload
from skinet.checkpoints.state_dict import normalize_state_dict_keys
from skinet.checkpoints.threshold import Threshold
from skinet.config.errors import ConfigError
from skinet.config.experiment import ExperimentConfig, parse_config
from skinet.models.unet2d import UNet2D, inference_unet, without_aux_heads

MODEL_PREFIX = "model."
ZIP_HEADER = b"PK\x03\x04"
"""The first bytes of a zip archive, which torch.save writes."""


@dataclass(frozen=True)
class SkinetCheckpoint:
    """What inference needs from a training checkpoint.

    Attributes:
        path: The file read.
        config: The resolved experiment config the model was trained with.
        state_dict: UNet2D weights, keys without the ``model.`` / ``_orig_mod.`` prefixes.
        payload: The SkiNet entry as read (format upgraded), thresholds included.
    """

    path: Path
    config: ExperimentConfig
    state_dict: dict[str, Tensor]
    payload: CheckpointPayload

    @property
    def val_optimal_threshold(self) -> float | None:
        """Threshold chosen on the validation set (``None`` if never swept)."""
        return self.payload.val_optimal_threshold

    @property
    def threshold_used(self) -> float | None:
        """Threshold the training run used last."""
        return self.payload.threshold_used

    @property
    def threshold_choice(self) -> Threshold:
        """The threshold to predict with and its source
        (:attr:`~skinet.checkpoints.format.CheckpointPayload.threshold_choice`)."""
        return self.payload.threshold_choice

    @property
    def threshold(self) -> float:
        """The value of :attr:`threshold_choice` (calibrated, else the training run's, else 0.5)."""
        return self.payload.threshold

    @property
    def tta(self) -> bool:
        """Whether to predict with flips (:attr:`CheckpointPayload.tta
        <skinet.checkpoints.format.CheckpointPayload.tta>`)."""
        return self.payload.tta


def _safe_load(path: Path, map_location: str | torch.device) -> Any:
    if not zipfile.is_zipfile(path):
        # torch.save has written zip archives since torch 1.6; anything else (a text file, an
        # HTML error page, a truncated download) would otherwise surface as raw unpickler text.
        with path.open("rb") as handle:
            head = handle.read(16)
        if head.startswith(ZIP_HEADER):
            raise CheckpointError(
                f"{path} is truncated or damaged: it starts as a torch.save archive but its end "
                f"is missing ({path.stat().st_size} bytes; a copy or download cut short, or a "
                "disk that filled up while it was written). Copy it again, or use another "
                "checkpoint of the run (checkpoints/best-*.ckpt, last.ckpt)."
            )
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


def describe_checkpoints_beside(path: Path) -> str:
    """A hint for an unreadable ``path``: the other ``*.ckpt`` files in its folder that look
    whole (a complete torch.save archive: a cheap check, no weights loaded), and which do not.
    """
    others = sorted(p for p in path.parent.glob("*.ckpt") if p.name != path.name and p.is_file())
    whole = [p.name for p in others if zipfile.is_zipfile(p)]
    damaged = [p.name for p in others if p.name not in whole]
    hint = f" Checkpoints beside it: {', '.join(whole)}." if whole else ""
    if damaged:
        hint += f" Unreadable beside it too: {', '.join(damaged)}."
    return hint


def read_checkpoint_file(
    path: str | Path, map_location: str | torch.device = "cpu"
) -> dict[str, Any]:
    """The raw contents of a SkiNet training checkpoint, read with ``weights_only=True``.

    Raises:
        FileNotFoundError: ``path`` does not exist.
        CheckpointError: The file is not a checkpoint, holds non-weight objects, or lacks a
            valid ``skinet`` entry.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"checkpoint not found: {path}")
    raw = _safe_load(path, map_location)
    CheckpointPayload.from_checkpoint(raw, str(path))
    return raw


def load_checkpoint(path: str | Path, map_location: str | torch.device = "cpu") -> SkinetCheckpoint:
    """Read a SkiNet training checkpoint safely (``weights_only=True``).

    Raises:
        FileNotFoundError: ``path`` does not exist.
        CheckpointError: The file holds non-weight objects, is corrupt, or lacks the ``skinet``
            entry, the model weights or a valid config.
    """
    path = Path(path)
    raw = read_checkpoint_file(path, map_location)
    payload = CheckpointPayload.from_checkpoint(raw, str(path))
    try:
        config = parse_config(payload.config, f"{path} (checkpoint config)")
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
    return SkinetCheckpoint(path=path, config=config, state_dict=weights, payload=payload)


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
    model = inference_unet(model_cfg)
    try:
        model.load_state_dict(without_aux_heads(checkpoint.state_dict), strict=True)
    except RuntimeError as error:
        raise CheckpointError(
            f"{checkpoint.path}: weights do not match MODEL_CONFIG: {error}"
        ) from None
    return model.eval()
