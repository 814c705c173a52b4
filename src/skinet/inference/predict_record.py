"""What ``skinet predict`` leaves beside its masks: ``predictions.json``, and the output folder it
agrees to write into.

``predictions.json`` records how the masks were made (checkpoints with their SHA-256, the
threshold and its source, preprocessing, TTA and post-processing, the SkiNet version), as
nnU-Net records its prediction arguments. It is written last, to a temporary file renamed into
place, so a folder whose run was cut short never looks complete.

The same file marks a folder as SkiNet's: ``skinet predict`` writes into a new or empty folder or
one with a ``predictions.json`` of its own (its masks are replaced), and refuses a folder that
holds the input images or other files unless ``--overwrite`` is given.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from skinet import __version__
from skinet.config.errors import UsageError
from skinet.imaging.preprocess import build_preprocessing
from skinet.inference.predictor import Predictor

PREDICTIONS_FILE = "predictions.json"
"""The record ``skinet predict`` writes beside the masks."""
WRITTEN_BY = "skinet predict"
"""``predictions.json``'s ``written_by``: how a folder is recognised as SkiNet's."""


class OutputFolderError(UsageError):
    """``--output`` holds files ``skinet predict`` did not write: exit 2, nothing written."""


def file_sha256(path: Path) -> str:
    """The SHA-256 of a file, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def written_by_skinet(output_dir: Path) -> bool:
    """Whether ``output_dir`` holds a ``predictions.json`` that ``skinet predict`` wrote."""
    record = output_dir / PREDICTIONS_FILE
    try:
        data = json.loads(record.read_text())
    except (OSError, ValueError):
        return False
    return isinstance(data, Mapping) and data.get("written_by") == WRITTEN_BY


def check_output_dir(output_dir: Path, images: Sequence[Path], overwrite: bool = False) -> None:
    """Refuse an output folder whose files ``skinet predict`` could overwrite without owning them.

    Accepted: a missing or empty folder (hidden files aside), or one with a ``predictions.json``
    of SkiNet's own (a previous prediction, whose masks are replaced). Refused, unless
    ``overwrite``: the folder of the input images, or any other folder with files in it.

    Raises:
        OutputFolderError: Naming the folder and ``--overwrite``; nothing has been written.
    """
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
) -> dict[str, Any]:
    """The contents of ``predictions.json`` (plain data).

    Args:
        predictor: The model that made the masks (threshold, preprocessing, TTA, post-processing).
        checkpoints: The checkpoint files (one, or an ensemble's members).
        source: The input image file or folder.
        num_images: Images given; ``written``: masks written; ``failures``: name -> reason.
        outputs: What was written per image besides the mask (``save_proba``, ``save_overlay``).
    """
    data = predictor.config.data
    return {
        "written_by": WRITTEN_BY,
        "skinet_version": __version__,
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "checkpoints": [
            {"path": str(path.resolve()), "sha256": file_sha256(path)} for path in checkpoints
        ],
        "threshold": predictor.threshold_choice.to_dict(),
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
