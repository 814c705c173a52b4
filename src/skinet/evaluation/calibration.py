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

from skinet.checkpoints.calibrated_card import (
    calibrate_card,
    checkpoint_card_path,
    find_checkpoint_card,
)
from skinet.checkpoints.format import CHECKPOINT_KEY, CheckpointError, CheckpointPayload
from skinet.checkpoints.model_card import MODEL_CARD_FILE
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
        "selection": tuned.selection,
        "pooled_dice": tuned.dice,
        "source_checkpoint": str(source),
        "source_threshold": source_threshold,
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
    }


def save_calibrated_checkpoint(
    source: str | Path, output: str | Path, calibration: dict[str, Any]
) -> Path:
    """Write ``output``: ``source`` with ``calibration`` in its SkiNet entry, and its card.

    The copy and its card are each written whole to a temporary file and renamed, so a kill or
    a failed write never leaves half a checkpoint or a checkpoint without its card.

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
    card = checkpoint_card_path(output)
    files = {card: _card_text(source, output, calibration).encode(), output: _serialised(raw)}
    partials = {path: path.with_name(f".{path.name}.partial") for path in files}
    placed: list[Path] = []
    writing = output
    try:
        output.parent.mkdir(parents=True, exist_ok=True)
        for writing, data in files.items():
            partials[writing].write_bytes(data)
        for writing in files:  # both written whole before either takes its name; card first
            os.replace(partials[writing], writing)
            placed.append(writing)
    except OSError as error:
        for path in [*partials.values(), *placed]:  # no card without its checkpoint
            path.unlink(missing_ok=True)
        reason = error.strerror or type(error).__name__
        raise CheckpointError(
            f"--save-calibrated: could not write {writing} ({reason}); nothing was written"
        ) from None
    return output


def _serialised(raw: dict[str, Any]) -> bytes:
    """``raw`` as torch writes it, in memory: a failed write to disk is then an OSError with
    its reason (torch's own file writer reports it as "unexpected pos")."""
    buffer = io.BytesIO()
    torch.save(raw, buffer)
    return buffer.getvalue()


def _card_text(source: Path, output: Path, calibration: dict[str, Any]) -> str:
    """The source's card (its run folder's, or the one beside it) stating the calibrated
    threshold, with a calibration section (a recalibrated copy states only its newest)."""
    found = find_checkpoint_card(source)
    text = found.read_text() if found is not None else f"# Model card: {output.stem}\n"
    # A run folder's card: its splits.csv and config.yaml lie in that folder.
    run = found.parent if found is not None and found.name == MODEL_CARD_FILE else None
    threshold = calibrated_threshold(calibration)
    return calibrate_card(text, threshold, checkpoint=output.resolve(), source_run=run)
