"""Evaluating a checkpoint on a dataset split, or a folder of predicted masks, per image.

Outputs of :func:`write_evaluation`: ``per_image.csv`` (one row per image), ``summary.json``
(means, spread, failures), ``jaccard_histogram.png`` and, when asked, ``failure_gallery.png``
(the worst images by Jaccard with their contours).
"""

from __future__ import annotations

import csv
import json
import logging
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from skinet.checkpoints.threshold import rounded
from skinet.datasets.layouts import Sample
from skinet.datasets.locate import select_samples as select_samples  # scripts take pairs here
from skinet.evaluation.figures import plot_jaccard_histogram as draw_jaccard_histogram
from skinet.evaluation.figures import save_figure
from skinet.evaluation.gallery import GALLERY_FILE, FailureGallery
from skinet.imaging.decode import DecodeError, read_image, read_mask, size_mismatch
from skinet.inference.predictor import Predictor
from skinet.metrics.masks import (
    ISIC2018_JACCARD_CUTOFF,
    MaskMetrics,
    compute_mask_metrics,
    summarize_metrics,
)
from skinet.metrics.surface import (
    SurfaceMetrics,
    check_spacing,
    compute_surface_metrics,
    summarize_surface_metrics,
)

log = logging.getLogger(__name__)

ProbabilityHook = Callable[[np.ndarray, np.ndarray], None]
"""Called with an image's probability map ``(H, W)`` and its mask."""

PER_IMAGE_FILE = "per_image.csv"
SUMMARY_FILE = "summary.json"
HISTOGRAM_FILE = "jaccard_histogram.png"


@dataclass
class EvaluationResult:
    """Per-image metrics by image ID, their summary and the images that could not be scored.

    Attributes:
        metrics: Overlap metrics (confusion counts) per image.
        surface: HD95 and ASSD per image (:mod:`skinet.metrics.surface`).
        sizes: ``(height, width)`` per image.
        failures: Images that could not be scored, with the reason.
        without_mask: Image files of a labelled folder that have no mask, by image ID: not
            scored, counted in the summary and the exit code.
        info: What was evaluated (checkpoint, split, options), copied into the summary.
        spacing_mm: ``(row, column)`` millimetres per pixel; adds the ``*_mm`` distances.
        gallery: The worst images kept for ``failure_gallery.png``; ``None`` for no gallery.
    """

    metrics: dict[str, MaskMetrics] = field(default_factory=dict)
    surface: dict[str, SurfaceMetrics] = field(default_factory=dict)
    sizes: dict[str, tuple[int, int]] = field(default_factory=dict)
    failures: dict[str, str] = field(default_factory=dict)
    without_mask: dict[str, str] = field(default_factory=dict)
    info: dict[str, Any] = field(default_factory=dict)
    spacing_mm: tuple[float, float] | None = None
    gallery: FailureGallery | None = None

    @property
    def summary(self) -> dict[str, Any]:
        """Overlap and surface-distance summaries plus failures and what was evaluated."""
        undefined = sorted(image_id for image_id, m in self.surface.items() if not m.defined)
        return {
            **summarize_metrics(list(self.metrics.values())),
            "jaccard_cutoff": ISIC2018_JACCARD_CUTOFF,
            **summarize_surface_metrics(
                list(self.surface.values()), with_mm=self.spacing_mm is not None
            ),
            "surface_undefined": undefined,
            "pixel_spacing_mm": None if self.spacing_mm is None else list(self.spacing_mm),
            "num_failed": len(self.failures),
            "failures": dict(self.failures),
            "num_without_mask": len(self.without_mask),
            "without_mask": dict(self.without_mask),
            **self.info,
        }

    @property
    def exit_code(self) -> int:
        """0 when every image was scored, 1 otherwise (a failure, or an image without mask)."""
        return 1 if self.failures or self.without_mask else 0


def new_result(
    pixel_spacing_mm: float | Sequence[float] | None,
    gallery_size: int,
    gallery_order: str = "jaccard",
    **info: Any,
) -> EvaluationResult:
    return EvaluationResult(
        info=info,
        spacing_mm=check_spacing(pixel_spacing_mm),
        gallery=FailureGallery(gallery_size, gallery_order) if gallery_size > 0 else None,
    )


def evaluate_predictor(
    predictor: Predictor,
    samples: Sequence[Sample],
    progress: bool = True,
    pixel_spacing_mm: float | Sequence[float] | None = None,
    gallery_size: int = 0,
    gallery_order: str = "jaccard",
    on_probabilities: ProbabilityHook | Mapping[bool, ProbabilityHook] | None = None,
) -> EvaluationResult:
    """Predict every sample at its original resolution and score it against its mask.

    Args:
        predictor: The model and its post-processing.
        samples: Image/mask pairs (e.g. from :func:`select_samples`).
        progress: Show a progress bar.
        pixel_spacing_mm: Millimetres per pixel (isotropic, or ``(row, column)``) for the
            ``hd95_mm``/``assd_mm`` columns.
        gallery_size: Keep the this many worst images for ``failure_gallery.png`` (0: none).
        gallery_order: Worst by ``jaccard`` or by ``area_ratio`` (:data:`GALLERY_ORDERS`).
        on_probabilities: Called with each scored image's probabilities ``(H, W)`` and mask,
            before thresholding (to tune a threshold in the same pass). A mapping from a way of
            predicting (``tta`` off or on) to a hook gives each hook that way's probabilities,
            e.g. to judge flips in the same pass: each image is read and preprocessed once.
    """
    from rich.progress import MofNCompleteColumn, Progress

    result = new_result(pixel_spacing_mm, gallery_size, gallery_order)
    batch: list[tuple[Sample, np.ndarray, np.ndarray]] = []

    if callable(on_probabilities):
        on_probabilities = {predictor.tta: on_probabilities}
    hooks = dict(on_probabilities or {})

    def flush() -> None:
        images = [image for _, image, _ in batch]
        maps = predictor.predict_proba_ways(images, {predictor.tta, *hooks})
        for i, (sample, image, target) in enumerate(batch):
            for tta, hook in hooks.items():
                hook(maps[tta][i], target)
            score_pair(result, sample.id, predictor.binarize(maps[predictor.tta][i]), target, image)
        batch.clear()

    columns = (*Progress.get_default_columns()[:2], MofNCompleteColumn())
    with Progress(*columns, disable=not progress) as bar:
        task = bar.add_task("evaluating", total=len(samples))
        for sample in samples:
            try:
                batch.append((sample, *read_labelled(sample)))
            except UnscorableImage as error:
                record_failure(result, sample.id, str(error))
            if len(batch) == predictor.batch_size:
                flush()
            bar.advance(task)
        if batch:
            flush()
    return result


class UnscorableImage(ValueError):
    """An image that cannot be scored: unreadable, or of another size than its mask."""


def read_labelled(sample: Sample) -> tuple[np.ndarray, np.ndarray]:
    """The image and mask of ``sample``: the one rule for what evaluation and threshold tuning
    count as a failed image instead of scoring it.

    Raises:
        UnscorableImage: Either file cannot be read, or their sizes differ.
    """
    try:
        image = read_image(sample.image_path)
    except (DecodeError, OSError) as error:
        raise UnscorableImage(f"{sample.image_path.name}: {error}") from None
    try:
        target = read_mask(sample.mask_path)
    except (DecodeError, OSError) as error:
        raise UnscorableImage(f"its mask {sample.mask_path}: {error}") from None
    if image.shape[:2] != target.shape:
        raise UnscorableImage(size_mismatch(target.shape, image.shape, sample.image_path))
    return image, target


def score_pair(
    result: EvaluationResult,
    image_id: str,
    pred: np.ndarray,
    target: np.ndarray,
    image: np.ndarray | None = None,
) -> None:
    try:
        metrics = compute_mask_metrics(pred, target)
        surface = compute_surface_metrics(pred, target, result.spacing_mm)
    except ValueError as error:
        record_failure(result, image_id, str(error))
        return
    result.metrics[image_id] = metrics
    result.surface[image_id] = surface
    result.sizes[image_id] = (int(target.shape[0]), int(target.shape[1]))
    if result.gallery is not None:
        result.gallery.offer(image_id, metrics, surface, pred, target, image)


def record_failure(result: EvaluationResult, image_id: str, message: str) -> None:
    result.failures[image_id] = message
    log.error("%s: %s", image_id, message)


def write_evaluation(result: EvaluationResult, output_dir: Path) -> dict[str, Path]:
    """Write ``per_image.csv``, ``summary.json``, the Jaccard histogram and the gallery.

    Undefined distances (one mask empty) are ``nan`` in the CSV and left out of the means;
    ``summary.json`` holds no NaN (a mean over no image is ``null``).

    Returns:
        The paths written by kind (``per_image``, ``summary``, ``histogram``, ``gallery``).
    """
    output_dir.mkdir(parents=True, exist_ok=True)
    paths = {
        "per_image": output_dir / PER_IMAGE_FILE,
        "summary": output_dir / SUMMARY_FILE,
        "histogram": output_dir / HISTOGRAM_FILE,
    }
    with_mm = result.spacing_mm is not None
    rows = [
        {
            "id": image_id,
            **metrics.as_row(),
            **result.surface[image_id].as_row(with_mm),
            "height": result.sizes[image_id][0],
            "width": result.sizes[image_id][1],
        }
        for image_id, metrics in result.metrics.items()
    ]
    with paths["per_image"].open("w", newline="") as handle:
        fieldnames = list(rows[0]) if rows else ["id"]
        writer = csv.DictWriter(handle, fieldnames=fieldnames)
        writer.writeheader()
        writer.writerows(rows)
    jaccards = [m.jaccard for m in result.metrics.values()]
    save_figure(draw_jaccard_histogram(jaccards, ISIC2018_JACCARD_CUTOFF), paths["histogram"])
    if result.gallery is not None:
        threshold = result.info.get("threshold")
        written = result.gallery.write(output_dir / GALLERY_FILE, threshold)
        if written is not None:
            paths["gallery"] = written
    # Last: a summary.json says the reports beside it are complete.
    summary = {k: None if _is_nan(v) else v for k, v in result.summary.items()}
    for key in ("threshold", "calibration"):  # float32 noise, not figures a person reads
        if key in summary:
            summary[key] = rounded(summary[key])
    paths["summary"].write_text(json.dumps(summary, indent=2, allow_nan=False))
    return paths


def _is_nan(value: Any) -> bool:
    return isinstance(value, float) and math.isnan(value)


def plot_jaccard_histogram(jaccards: Sequence[float], path: Path) -> None:
    """Write the per-image Jaccard histogram
    (:func:`skinet.evaluation.figures.plot_jaccard_histogram`)."""
    save_figure(draw_jaccard_histogram(list(jaccards), ISIC2018_JACCARD_CUTOFF), path)
