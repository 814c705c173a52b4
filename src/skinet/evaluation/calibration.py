"""Calibrating a trained model to one's own clinic: its threshold, tuned on labelled images.

``skinet evaluate --tune-threshold --save-calibrated OUT.ckpt`` writes a copy of the checkpoint
whose SkiNet entry carries the tuned threshold and where it was tuned
(:attr:`skinet.checkpoints.format.CheckpointPayload.calibration`). ``skinet predict``,
``evaluate`` and ``export`` then use that threshold, and the model card beside the copy
(``OUT.ckpt.MODEL_CARD.md``) says where it came from.
"""

from __future__ import annotations

import dataclasses
import io
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import torch

from skinet.checkpoints.format import CHECKPOINT_KEY, CheckpointError, CheckpointPayload
from skinet.checkpoints.model_card import calibrate_card, checkpoint_card_path, find_checkpoint_card
from skinet.checkpoints.read import read_checkpoint_file
from skinet.checkpoints.threshold import calibrated_threshold
from skinet.evaluation.tuning import TunedThreshold


def calibration_record(
    tuned: TunedThreshold, tuned_on: str, source: Path, source_threshold: float
) -> dict[str, Any]:
    """The ``calibration`` entry of a calibrated checkpoint (plain data)."""
    return {
        "threshold": tuned.threshold,
        "tuned_on": tuned_on,
        "num_images": tuned.num_images,
        "pooled_dice": tuned.dice,
        "source_checkpoint": str(source),
        "source_threshold": source_threshold,
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
    }


def save_calibrated_checkpoint(
    source: str | Path, output: str | Path, calibration: dict[str, Any]
) -> Path:
    """Write ``output``: ``source`` with ``calibration`` in its SkiNet entry, and its card.

    The copy is written to a temporary file and renamed, so a kill never leaves half a
    checkpoint under ``output``.

    Raises:
        CheckpointError: ``output`` is ``source`` (the original is never overwritten), or it
            cannot be written (a read-only folder, a full disk, a file-size limit).
    """
    source, output = Path(source), Path(output)
    if output.resolve() == source.resolve():
        raise CheckpointError(
            f"--save-calibrated {output} is the checkpoint being calibrated: give a new file name "
            "(the original stays as trained)"
        )
    raw = read_checkpoint_file(source)
    payload = CheckpointPayload.from_checkpoint(raw, str(source))
    raw[CHECKPOINT_KEY] = dataclasses.replace(payload, calibration=calibration).to_dict()
    partial = output.with_name(f".{output.name}.partial")
    try:
        output.parent.mkdir(parents=True, exist_ok=True)
        # Serialised in memory, written by Python: a failed write is an OSError with its reason
        # (torch's own writer reports it as "unexpected pos").
        buffer = io.BytesIO()
        torch.save(raw, buffer)
        partial.write_bytes(buffer.getvalue())
        os.replace(partial, output)
    except OSError as error:
        partial.unlink(missing_ok=True)
        reason = error.strerror or type(error).__name__
        raise CheckpointError(
            f"--save-calibrated: could not write {output} ({reason}); nothing was written"
        ) from None
    _write_card(source, output, calibration)
    return output


def _write_card(source: Path, output: Path, calibration: dict[str, Any]) -> Path:
    """The source's card (its run folder's, or the one beside it) stating the calibrated
    threshold, with a calibration section (a recalibrated copy states only its newest)."""
    card = checkpoint_card_path(output)
    found = find_checkpoint_card(source)
    text = found.read_text() if found is not None else f"# Model card: {output.stem}\n"
    card.write_text(calibrate_card(text, calibrated_threshold(calibration)))
    return card
