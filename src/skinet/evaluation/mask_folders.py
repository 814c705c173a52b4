"""Folders of masks: image IDs from file names, pairing images with masks, and scoring a folder of
predicted masks against a folder of ground truth.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

from skinet.datasets.layouts import ID_SUFFIXES, IGNORED_SUFFIXES, MASK_SUFFIXES, Sample
from skinet.evaluation.evaluate import EvaluationResult, new_result, record_failure, score_pair
from skinet.imaging.decode import DecodeError, read_mask
from skinet.imaging.errors import DatasetError
from skinet.inference.predict import list_images

log = logging.getLogger(__name__)


def mask_id(path: Path) -> str:
    """Image ID of a mask file: its stem without one of :data:`ID_SUFFIXES`."""
    stem = path.stem
    for suffix in ID_SUFFIXES:
        if stem.endswith(suffix) and len(stem) > len(suffix):
            return stem[: -len(suffix)]
    return stem


def index_masks(folder: Path) -> dict[str, Path]:
    """Mask files of ``folder`` by image ID (first file wins on a duplicate ID, with a warning)."""
    if not folder.is_dir():
        raise FileNotFoundError(f"mask folder not found: {folder}")
    masks: dict[str, Path] = {}
    for path in sorted(folder.iterdir()):
        if (
            not path.is_file()
            or path.suffix.lower() not in MASK_SUFFIXES
            or path.name.startswith(".")
            or path.stem.endswith(IGNORED_SUFFIXES)
        ):
            continue
        key = mask_id(path)
        if key in masks:
            log.warning("%s: image ID %r already taken by %s; ignored", path, key, masks[key].name)
            continue
        masks[key] = path
    return masks


def pair_labelled_folder(images: Path, masks: Path) -> tuple[list[Sample], list[Path]]:
    """Images of ``images`` paired with masks of ``masks`` by image ID, and the images that have
    no mask (which ``skinet evaluate`` counts as not scored)."""
    if not images.is_dir():
        raise FileNotFoundError(f"image folder not found: {images}")
    by_id = index_masks(masks)
    samples, unmatched = [], []
    for path in list_images(images):
        if path.stem in by_id:
            samples.append(Sample(path.stem, path, by_id[path.stem]))
        else:
            unmatched.append(path)
    if not samples:
        raise DatasetError(f"no image in {images} has a mask in {masks} (paired by file stem)")
    return samples, unmatched


def pair_image_folder(images: Path, masks: Path) -> list[Sample]:
    """Images of ``images`` paired with masks of ``masks`` by image ID (as ``skinet evaluate``).

    An image without a mask is skipped with a warning.
    """
    samples, unmatched = pair_labelled_folder(images, masks)
    if unmatched:
        names = [path.name for path in unmatched]
        log.warning("%d image(s) without a mask in %s skipped: %s", len(names), masks, names[:5])
    return samples


def evaluate_mask_folders(
    predictions: Path,
    ground_truth: Path,
    pixel_spacing_mm: float | Sequence[float] | None = None,
    gallery_size: int = 0,
    gallery_order: str = "jaccard",
) -> EvaluationResult:
    """Score predicted masks against ground-truth masks, paired by image ID.

    IDs are file stems without ``_mask``/``_segmentation``/... (:data:`ID_SUFFIXES`), so
    ``ISIC_1_mask.png`` pairs with ``ISIC_1_segmentation.png``. A ground truth without a
    prediction is a failure; a prediction without a ground truth is only warned about.
    ``pixel_spacing_mm`` and ``gallery_size`` as in :func:`evaluate_predictor` (the gallery
    draws the contours on a dark canvas: there are no images here).
    """
    preds, targets = index_masks(predictions), index_masks(ground_truth)
    if not targets:
        raise DatasetError(f"no ground-truth masks in {ground_truth}")
    if not set(preds) & set(targets):
        raise DatasetError(
            f"no prediction in {predictions} has the ID of a ground-truth mask in {ground_truth} "
            f"({len(preds)} prediction(s), e.g. {sorted(preds)[:3]}; ground-truth IDs e.g. "
            f"{sorted(targets)[:3]}). IDs are file stems without {', '.join(ID_SUFFIXES)}; "
            "nothing was written."
        )
    extra = sorted(set(preds) - set(targets))
    if extra:
        log.warning("%d prediction(s) without ground truth ignored: %s", len(extra), extra[:5])
    result = new_result(
        pixel_spacing_mm,
        gallery_size,
        gallery_order,
        predictions=str(predictions),
        ground_truth=str(ground_truth),
    )
    for image_id, target_path in targets.items():
        if image_id not in preds:
            record_failure(
                result, image_id, f"no prediction for {target_path.name} in {predictions}"
            )
            continue
        try:
            pred, target = read_mask(preds[image_id]), read_mask(target_path)
        except (DecodeError, OSError) as error:
            record_failure(result, image_id, str(error))
            continue
        score_pair(result, image_id, pred, target)
    return result
