"""Faults a run meets at its start: an output folder it cannot write to, and running out of memory
(named with the settings to lower).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import torch

from skinet.config.experiment import ExperimentConfig


def check_output_dir(output_dir: Path) -> None:
    """Say why ``TRAIN_CONFIG.output_dir`` cannot hold runs, before anything starts.

    The folder itself, or the nearest existing folder above it, is probed with a temporary
    folder that is removed at once: nothing is left behind.

    Raises:
        ValueError: It is a file, or it cannot be created or written to.
    """
    where = f"TRAIN_CONFIG.output_dir {output_dir}"
    existing = output_dir
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        what = "is a file" if existing == output_dir else f"is inside the file {existing}"
        raise ValueError(f"{where} {what}, not a folder: give a folder for the run folders")
    try:
        os.rmdir(tempfile.mkdtemp(dir=existing, prefix=".skinet-write-check-"))
    except OSError as error:
        reason = error.strerror or type(error).__name__
        raise ValueError(
            f"{where} cannot be written to ({reason}): give a folder you can write to, e.g. "
            "--set TRAIN_CONFIG.output_dir=runs"
        ) from None


class OutOfMemoryError(ValueError):
    """The run ran out of memory; the message says which settings to lower."""


def out_of_memory_error(
    error: RuntimeError, cfg: ExperimentConfig, doing: str
) -> OutOfMemoryError | None:
    """An :class:`OutOfMemoryError` saying what to lower for an out-of-memory ``error``
    (``None`` for any other error)."""
    text = str(error)
    if not (
        isinstance(error, torch.OutOfMemoryError)
        or "out of memory" in text
        or "can't allocate memory" in text
    ):
        return None
    first = next((line.strip() for line in text.splitlines() if "memory" in line), text)
    train, data, model = cfg.train, cfg.data, cfg.model
    return OutOfMemoryError(
        f"out of memory while {doing} ({first[:200]}). Lower what the run holds at once: "
        f"TRAIN_CONFIG.batch_size (now {train.batch_size}), DATA_CONFIG.image_size (now "
        f"{data.image_size}), MODEL_CONFIG.out_channels_layer1 (now "
        f"{model.out_channels_layer1}) or number_of_layers (now {model.number_of_layers}); on "
        "a GPU, TRAIN_CONFIG.precision: 16-mixed halves the activations"
    )
