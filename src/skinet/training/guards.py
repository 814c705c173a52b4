"""Faults a run meets: an output folder it cannot write to, running out of memory (named with the
settings to lower) and a full disk (named with the file it could not write).
"""

from __future__ import annotations

import errno
import os
import tempfile
import traceback
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


NO_SPACE_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)
"""No space left, over the disk quota, over the file-size limit: the disk took no more."""

NO_SPACE_TEXTS = ("database or disk is full", "no space left on device", "disk quota exceeded")
"""The same, as SQLite (the MLflow store) and wrapped errors say it."""


def _file_being_written(error: BaseException) -> str | None:
    """The path the innermost frame of ``error`` was writing (``filepath``, ``path``, ...): an
    ``OSError`` raised through a buffered or fsspec file names no file of its own."""
    frames = [frame for frame, _ in traceback.walk_tb(error.__traceback__)]
    for frame in reversed(frames):
        for name in ("filepath", "urlpath", "path", "filename", "file"):
            value = frame.f_locals.get(name)
            if isinstance(value, str | os.PathLike) and str(value):
                return str(value)
    return None


class DiskFullError(ValueError):
    """The disk took no more while the run wrote; the message names the file and what to do."""


def disk_full_error(
    error: BaseException, run_dir: Path, mlflow_marked: bool | None = None
) -> DiskFullError | None:
    """A :class:`DiskFullError` for a write that failed for want of space anywhere in ``error``'s
    chain (``None`` for any other error).

    Args:
        error: What stopped the run.
        run_dir: The run's folder.
        mlflow_marked: Whether its MLflow run could be marked ``FAILED`` (``None``: it has none).
    """
    seen: list[BaseException] = []
    cause: BaseException | None = error
    while cause is not None and cause not in seen and len(seen) < 10:
        seen.append(cause)
        cause = cause.__cause__ or cause.__context__
    for item in seen:
        text = str(item).lower()
        if isinstance(item, OSError) and item.errno in NO_SPACE_ERRNOS:
            # A move names the destination second: that is the file on the full disk.
            written = item.filename2 or item.filename or _file_being_written(item)
            what = f"writing {written}" if written else "writing"
            reason = item.strerror or str(item)
            left = (
                f"{written} may be incomplete"
                if written and Path(written).is_file() and not str(written).endswith(".ckpt")
                else "Nothing of the failed write is kept"
            )
        elif any(marker in text for marker in NO_SPACE_TEXTS):
            what, reason = "writing to the MLflow store", str(item).splitlines()[0][:200]
            left = "Nothing of the failed write is kept"
        else:
            continue
        return DiskFullError(
            f"the disk is full: {what} failed ({reason}). {left}. Free space where the run "
            f"writes ({run_dir}), then continue the run with `skinet train --config "
            f"{run_dir / 'config.yaml'} --resume last` (or start it again if it saved no "
            f"checkpoint yet){_mlflow_state(mlflow_marked)}"
        )
    return None


def _mlflow_state(marked: bool | None) -> str:
    if marked is None:
        return ""
    if marked:
        return "; its MLflow run is marked FAILED"
    return (
        "; its MLflow run could not be marked FAILED (its store could not be written either) "
        "and shows RUNNING until the resume takes it over"
    )
