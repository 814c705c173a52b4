"""Evaluating a checkpoint on a dataset split, or a folder of predicted masks, per image.

Outputs of :func:`write_evaluation`: ``per_image.csv`` (one row per image), ``summary.json``
(means, spread, failures) and ``jaccard_histogram.png``.
"""

from __future__ import annotations

import csv
import json
import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from skinet.config import ExperimentConfig
from skinet.data.errors import DatasetError
from skinet.data.io import DecodeError, read_image, read_mask
from skinet.data.layouts import MASK_SUFFIXES, Sample, assign_splits, read_layout
from skinet.data.roots import resolve_root
from skinet.inference.metrics import (
    ISIC2018_JACCARD_CUTOFF,
    MaskMetrics,
    compute_mask_metrics,
    summarize_metrics,
)
from skinet.inference.predictor import Predictor

log = logging.getLogger(__name__)

PER_IMAGE_FILE = "per_image.csv"
SUMMARY_FILE = "summary.json"
HISTOGRAM_FILE = "jaccard_histogram.png"
ID_SUFFIXES = ("_segmentation", "_mask", "_lesion", "_prediction", "_pred")
"""Stem suffixes removed to pair predictions with ground truth by image ID."""
IGNORED_SUFFIXES = ("_proba", "_overlay", "_superpixels")
"""Files ``skinet predict`` writes beside the masks, and ISIC superpixel maps: not masks."""
SPLIT_CHOICES = ("test", "val", "train", "all")


@dataclass
class EvaluationResult:
    """Per-image metrics by image ID, their summary and the images that could not be scored."""

    metrics: dict[str, MaskMetrics] = field(default_factory=dict)
    sizes: dict[str, tuple[int, int]] = field(default_factory=dict)
    failures: dict[str, str] = field(default_factory=dict)
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def summary(self) -> dict[str, Any]:
        """:func:`summarize_metrics` plus failures and what was evaluated."""
        return {
            **summarize_metrics(list(self.metrics.values())),
            "jaccard_cutoff": ISIC2018_JACCARD_CUTOFF,
            "num_failed": len(self.failures),
            "failures": dict(self.failures),
            **self.info,
        }

    @property
    def exit_code(self) -> int:
        """0 when every image was scored, 1 otherwise."""
        return 1 if self.failures else 0


def select_samples(
    config: ExperimentConfig,
    data_dir: Path | None = None,
    dataset: str | None = None,
    split: str = "test",
) -> list[Sample]:
    """The image/mask pairs of ``split`` (or ``all``), split as training split them.

    Layouts without an official split are carved with the checkpoint's ``split_random_seed``
    and fractions, so ``test`` is the same held-out set the training run tested on.
    """
    if split not in SPLIT_CHOICES:
        raise ValueError(f"split must be one of {SPLIT_CHOICES}, got {split!r}")
    data = config.data
    root = Path(data_dir) if data_dir is not None else resolve_root(config, generate=False)
    index = read_layout(root, dataset or data.dataset, mask_suffix=data.mask_suffix)
    for problem in index.problems:
        log.warning("%s", problem)
    if split == "all":
        samples = [sample for pairs in index.splits.values() for sample in pairs]
    else:
        splits = assign_splits(index, data.split_random_seed, data.val_fraction, data.test_fraction)
        samples = splits.get(split, [])
    if not samples:
        raise DatasetError(f"no image/mask pairs in split {split!r} of {root}")
    return samples


def evaluate_predictor(
    predictor: Predictor, samples: Sequence[Sample], progress: bool = True
) -> EvaluationResult:
    """Predict every sample at its original resolution and score it against its mask."""
    from rich.progress import MofNCompleteColumn, Progress

    result = EvaluationResult()
    batch: list[tuple[Sample, np.ndarray, np.ndarray]] = []

    def flush() -> None:
        masks = predictor.predict_batch([image for _, image, _ in batch])
        for (sample, _, target), pred in zip(batch, masks, strict=True):
            _score(result, sample.id, pred, target)
        batch.clear()

    columns = (*Progress.get_default_columns()[:2], MofNCompleteColumn())
    with Progress(*columns, disable=not progress) as bar:
        task = bar.add_task("evaluating", total=len(samples))
        for sample in samples:
            try:
                image, target = read_image(sample.image_path), read_mask(sample.mask_path)
            except (DecodeError, OSError) as error:
                _fail(result, sample.id, f"{sample.image_path.name}: {error}")
                bar.advance(task)
                continue
            if image.shape[:2] != target.shape:
                _fail(result, sample.id, f"image {image.shape[:2]} and mask {target.shape} differ")
            else:
                batch.append((sample, image, target))
            if len(batch) == predictor.batch_size:
                flush()
            bar.advance(task)
        if batch:
            flush()
    return result


def _score(result: EvaluationResult, image_id: str, pred: np.ndarray, target: np.ndarray) -> None:
    try:
        result.metrics[image_id] = compute_mask_metrics(pred, target)
        result.sizes[image_id] = (int(target.shape[0]), int(target.shape[1]))
    except ValueError as error:
        _fail(result, image_id, str(error))


def _fail(result: EvaluationResult, image_id: str, message: str) -> None:
    result.failures[image_id] = message
    log.error("%s: %s", image_id, message)


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


def evaluate_mask_folders(predictions: Path, ground_truth: Path) -> EvaluationResult:
    """Score predicted masks against ground-truth masks, paired by image ID.

    IDs are file stems without ``_mask``/``_segmentation``/... (:data:`ID_SUFFIXES`), so
    ``ISIC_1_mask.png`` pairs with ``ISIC_1_segmentation.png``. A ground truth without a
    prediction is a failure; a prediction without a ground truth is only warned about.
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
    result = EvaluationResult(
        info={"predictions": str(predictions), "ground_truth": str(ground_truth)}
    )
    for image_id, target_path in targets.items():
        if image_id not in preds:
            _fail(result, image_id, f"no prediction for {target_path.name} in {predictions}")
            continue
        try:
            pred, target = read_mask(preds[image_id]), read_mask(target_path)
        except (DecodeError, OSError) as error:
            _fail(result, image_id, str(error))
            continue
        _score(result, image_id, pred, target)
    return result


def write_evaluation(result: EvaluationResult, output_dir: Path) -> dict[str, Path]:
    """Write ``per_image.csv``, ``summary.json`` and the Jaccard histogram; return their paths."""
    output_dir.mkdir(parents=True, exist_ok=True)
    paths = {
        "per_image": output_dir / PER_IMAGE_FILE,
        "summary": output_dir / SUMMARY_FILE,
        "histogram": output_dir / HISTOGRAM_FILE,
    }
    rows = [
        {
            "id": image_id,
            **metrics.as_row(),
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
    summary = result.summary
    paths["summary"].write_text(json.dumps(summary, indent=2))
    plot_jaccard_histogram([m.jaccard for m in result.metrics.values()], paths["histogram"])
    return paths


def plot_jaccard_histogram(jaccards: Iterable[float], path: Path) -> None:
    """Histogram of per-image Jaccard in 0.05 bins, with the mean and the 0.65 cutoff marked."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    values = np.asarray(list(jaccards), dtype=float)
    figure = Figure(figsize=(7.5, 4.5), dpi=120)
    FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    bins = np.linspace(0.0, 1.0, 21).tolist()
    if values.size:
        below = values < ISIC2018_JACCARD_CUTOFF
        axes.hist(
            [values[below], values[~below]],
            bins=bins,
            stacked=True,
            color=["#d95f02", "#1b9e77"],
            edgecolor="white",
            label=[
                f"below {ISIC2018_JACCARD_CUTOFF} ({below.sum()})",
                f"at or above {ISIC2018_JACCARD_CUTOFF} ({(~below).sum()})",
            ],
        )
        mean = float(values.mean())
        thresholded = float(np.where(below, 0.0, values).mean())
        axes.axvline(mean, color="black", linewidth=1.5, label=f"mean Jaccard {mean:.3f}")
        axes.axvline(
            ISIC2018_JACCARD_CUTOFF,
            color="grey",
            linestyle="--",
            linewidth=1.2,
            label=f"ISIC 2018 cutoff (thresholded Jaccard {thresholded:.3f})",
        )
        axes.legend(loc="best", fontsize=9, framealpha=0.9)
    axes.set_xlim(0.0, 1.0)
    axes.set_xticks(np.linspace(0.0, 1.0, 11))
    axes.set_xlabel("Jaccard index per image")
    axes.set_ylabel("images")
    axes.set_title(f"Per-image Jaccard ({values.size} images)")
    axes.grid(axis="y", alpha=0.3)
    axes.spines[["top", "right"]].set_visible(False)
    figure.tight_layout()
    figure.savefig(path)
