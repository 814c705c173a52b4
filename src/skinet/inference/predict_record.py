"""What ``skinet predict`` leaves beside its masks: ``predictions.json``, and the output folder it
agrees to write into.

``predictions.json`` records how the masks were made (checkpoints with their SHA-256, the
threshold and its source, preprocessing, TTA and post-processing, the SkiNet version), as
nnU-Net records its prediction arguments, and the files the run wrote (``written``). It is
written twice, each time to a temporary file renamed into place: at the start marked
``"complete": false`` (with the arguments and every file the run may write), and at the end
``"complete": true``. A folder whose run was cut short never looks complete.

The same file marks a folder as SkiNet's: ``skinet predict`` writes into a new or empty folder or
one with a ``predictions.json`` of its own (complete or not: the files it lists as written are
removed first, and only those), and refuses a folder that holds the input images or other files
unless ``--overwrite`` is given.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from skinet import __version__
from skinet.checkpoints.threshold import rounded
from skinet.config.errors import UsageError
from skinet.imaging.preprocess import build_preprocessing
from skinet.inference.predict import OUTPUT_SUFFIXES
from skinet.inference.predictor import Predictor
from skinet.runtime.files import file_sha256

PREDICTIONS_FILE = "predictions.json"
"""The record ``skinet predict`` writes beside the masks."""
WRITTEN_BY = "skinet predict"
"""``predictions.json``'s ``written_by``: how a folder is recognised as SkiNet's."""


class OutputFolderError(UsageError):
    """``--output`` holds files ``skinet predict`` did not write: exit 2, nothing written."""


def _own_record(output_dir: Path) -> Mapping[str, Any] | None:
    """The ``predictions.json`` of ``output_dir`` if ``skinet predict`` wrote it."""
    try:
        data = json.loads((output_dir / PREDICTIONS_FILE).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, Mapping) and data.get("written_by") == WRITTEN_BY else None


def written_by_skinet(output_dir: Path) -> bool:
    """Whether ``output_dir`` holds a ``predictions.json`` that ``skinet predict`` wrote."""
    return _own_record(output_dir) is not None


@dataclass(frozen=True)
class EarlierPrediction:
    """What an earlier ``skinet predict`` left in a folder, read once from its record."""

    listed: list[str]
    """The files its ``predictions.json`` lists as ``written``: removed before this run writes.
    Only plain names of the folder that end as a prediction output does (``_mask.png``,
    ``_proba.png``, ``_proba.npy``, ``_overlay.png``): a record never names another file."""
    unlisted: list[str]
    """Under a record without a ``written`` list (an older SkiNet's): the prediction files this
    run does not replace. It may or may not have written them, so they are never removed;
    ``skinet predict`` says they are there."""


def earlier_prediction(output_dir: Path, planned: Sequence[str]) -> EarlierPrediction:
    """What an earlier ``skinet predict`` into ``output_dir`` wrote, against the ``planned``
    names of this run; nothing for a missing folder or one without SkiNet's record."""
    record = _own_record(output_dir) if output_dir.is_dir() else None
    if record is None:
        return EarlierPrediction([], [])
    if "written" not in record:
        replaced = set(planned)
        unlisted = sorted(
            path.name
            for path in output_dir.iterdir()
            if path.name.endswith(OUTPUT_SUFFIXES) and path.name not in replaced
        )
        return EarlierPrediction([], unlisted)
    names = record["written"]
    listed = [
        name
        for name in (names if isinstance(names, list) else [])
        if isinstance(name, str)
        and Path(name).name == name
        and not name.startswith(".")
        and name.endswith(OUTPUT_SUFFIXES)
    ]
    return EarlierPrediction(listed, [])


def remove_outputs(output_dir: Path, names: Sequence[str]) -> int:
    """Remove the files ``names`` of ``output_dir`` that exist; how many were removed."""
    removed = 0
    for name in names:
        path = output_dir / name
        if path.is_symlink() or path.is_file():
            path.unlink()
            removed += 1
    return removed


def started_record(arguments: Mapping[str, Any], files: Sequence[str]) -> dict[str, Any]:
    """``predictions.json`` while a run is under way: ``"complete": false``, the arguments, and
    every file it may write (``written``), so a rerun recognises the folder and clears them."""
    return {
        "written_by": WRITTEN_BY,
        "complete": False,
        "skinet_version": __version__,
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "arguments": dict(arguments),
        "written": list(files),
    }


def check_output_dir(output_dir: Path, images: Sequence[Path], overwrite: bool = False) -> None:
    """Refuse an output folder whose files ``skinet predict`` could overwrite without owning them.

    Accepted: a missing or empty folder (hidden files aside), or one with a ``predictions.json``
    of SkiNet's own (a previous prediction, whose masks are replaced). Refused, unless
    ``overwrite``: the folder of the input images, or any other folder with files in it. Refused
    always: an existing file.

    Raises:
        OutputFolderError: Naming the folder and ``--overwrite``; nothing has been written.
    """
    if output_dir.exists() and not output_dir.is_dir():
        raise OutputFolderError(f"--output {output_dir} is a file: give a folder")
    if overwrite or not output_dir.is_dir():
        return
    target = output_dir.resolve()
    if any(image.resolve().parent == target for image in images):
        raise OutputFolderError(
            f"--output {output_dir} is the folder of the input images: the masks would be "
            "written among them. Give another --output folder, or --overwrite to write there "
            "anyway (nothing was written)"
        )
    others = sorted(p.name for p in output_dir.iterdir() if not p.name.startswith("."))
    if others and not written_by_skinet(output_dir):
        shown = ", ".join(others[:3]) + (", ..." if len(others) > 3 else "")
        raise OutputFolderError(
            f"--output {output_dir} holds {len(others)} file(s) skinet predict did not write "
            f"({shown}; no {PREDICTIONS_FILE} of its own): its <stem>_mask.png files could "
            "replace them. Give a new or empty folder, or --overwrite to write there anyway "
            "(nothing was written)"
        )


def predictions_record(
    predictor: Predictor,
    checkpoints: Sequence[Path],
    source: Path,
    num_images: int,
    written: int,
    failures: Mapping[str, str],
    outputs: Mapping[str, Any],
    arguments: Mapping[str, Any] | None = None,
    files: Sequence[str] = (),
) -> dict[str, Any]:
    """The contents of ``predictions.json`` of a finished run (plain data).

    Args:
        predictor: The model that made the masks (threshold, preprocessing, TTA, post-processing).
        checkpoints: The checkpoint files (one, or an ensemble's members).
        source: The input image file or folder.
        num_images: Images given; ``written``: masks written; ``failures``: name -> reason.
        outputs: What was written per image besides the mask (``save_proba``, ``save_overlay``).
        arguments: The command's arguments; ``files``: the names of the files written.
    """
    data = predictor.config.data
    return {
        "written_by": WRITTEN_BY,
        "complete": True,
        "skinet_version": __version__,
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "checkpoints": [
            {"path": str(path.resolve()), "sha256": file_sha256(path)} for path in checkpoints
        ],
        "threshold": rounded(predictor.threshold_choice.to_dict()),
        "preprocessing": {
            "image_size": data.image_size,
            "normalization_mode": data.normalization_mode,
            "mean": list(data.mean),
            "std": list(data.std),
            "steps": build_preprocessing(data).describe(),
        },
        "tta": predictor.tta,
        "post_processing": {
            "keep_largest": predictor.keep_largest,
            "fill_holes": predictor.fill_holes,
        },
        "outputs": {"mask": "<stem>_mask.png (0/255, the image's own size)", **outputs},
        "input": str(source.resolve()),
        "num_images": num_images,
        "num_masks": written,
        "failures": dict(failures),
        "arguments": dict(arguments or {}),
        "written": list(files),
    }


def write_predictions_record(output_dir: Path, record: Mapping[str, Any]) -> Path:
    """Write ``predictions.json`` through a temporary file renamed into place."""
    path = output_dir / PREDICTIONS_FILE
    partial = output_dir / f".{PREDICTIONS_FILE}.partial"
    try:
        partial.write_text(json.dumps(record, indent=2) + "\n")
        os.replace(partial, path)
    finally:
        partial.unlink(missing_ok=True)
    return path
