"""Per-image segmentation metrics at the original resolution, and their summary.

Conventions (the same as the per-image metrics of :mod:`skinet.metrics.thresholds`): a pixel
is lesion where the mask is non-zero; a ratio whose denominator is zero is 1.0. So an image
whose ground truth and prediction are both empty scores Jaccard 1 and Dice 1, and an empty
ground truth with a non-empty prediction scores 0. Sensitivity of an image without lesion
pixels is 1.0 (nothing to miss), and specificity of an all-lesion image is 1.0 likewise.

The area ratio (predicted lesion area / true lesion area) shows contour bias, which Jaccard does
not: above 1 the model draws the lesion too large (a dilated contour, the failure met on another
clinic's images), below 1 too small. It is undefined (``nan``) for an image without lesion pixels
and left out of :func:`summarize_metrics`' median.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np

ISIC2018_JACCARD_CUTOFF = 0.65
"""ISIC 2018 Task 1 scores an image below this Jaccard as 0 ("thresholded Jaccard")."""

METRIC_NAMES = (
    "jaccard",
    "dice",
    "thresholded_jaccard",
    "sensitivity",
    "specificity",
    "accuracy",
)


def _ratio(num: int, den: int) -> float:
    return 1.0 if den == 0 else num / den


@dataclass(frozen=True)
class MaskMetrics:
    """Confusion counts of one image; the metrics are derived from them."""

    tp: int
    fp: int
    fn: int
    tn: int

    @property
    def jaccard(self) -> float:
        """``tp / (tp + fp + fn)``."""
        return _ratio(self.tp, self.tp + self.fp + self.fn)

    @property
    def dice(self) -> float:
        """``2 tp / (2 tp + fp + fn)``."""
        return _ratio(2 * self.tp, 2 * self.tp + self.fp + self.fn)

    @property
    def thresholded_jaccard(self) -> float:
        """Jaccard, or 0 when it is below :data:`ISIC2018_JACCARD_CUTOFF`."""
        return self.jaccard if self.jaccard >= ISIC2018_JACCARD_CUTOFF else 0.0

    @property
    def sensitivity(self) -> float:
        """``tp / (tp + fn)``."""
        return _ratio(self.tp, self.tp + self.fn)

    @property
    def specificity(self) -> float:
        """``tn / (tn + fp)``."""
        return _ratio(self.tn, self.tn + self.fp)

    @property
    def accuracy(self) -> float:
        """``(tp + tn) / pixels``."""
        return _ratio(self.tp + self.tn, self.tp + self.fp + self.fn + self.tn)

    @property
    def area_ratio(self) -> float:
        """``(tp + fp) / (tp + fn)``: predicted over true lesion area; ``nan`` without lesion."""
        true_area = self.tp + self.fn
        return (self.tp + self.fp) / true_area if true_area else float("nan")

    def as_row(self) -> dict[str, float | int]:
        """Metrics, the area ratio, then counts, as a flat mapping for CSV rows."""
        metrics = {name: getattr(self, name) for name in METRIC_NAMES}
        return {**metrics, "area_ratio": self.area_ratio, **asdict(self)}


def median_area_ratio(metrics: Sequence[MaskMetrics]) -> float:
    """Median :attr:`MaskMetrics.area_ratio` over the images with lesion pixels (``nan``: none)."""
    ratios = [m.area_ratio for m in metrics if m.tp + m.fn > 0]
    return float(np.median(ratios)) if ratios else float("nan")


def compute_mask_metrics(pred: np.ndarray, target: np.ndarray) -> MaskMetrics:
    """Counts of a predicted mask against the ground truth (same ``(H, W)``; non-zero = lesion).

    Raises:
        ValueError: The shapes differ (metrics are computed at the original resolution).
    """
    if pred.shape != target.shape:
        raise ValueError(
            f"prediction size {pred.shape[1::-1]} does not match ground truth size "
            f"{target.shape[1::-1]} (W, H); metrics are computed at the original resolution"
        )
    pred, target = pred > 0, target > 0
    tp = int(np.count_nonzero(pred & target))
    fp = int(np.count_nonzero(pred)) - tp
    fn = int(np.count_nonzero(target)) - tp
    return MaskMetrics(tp=tp, fp=fp, fn=fn, tn=int(pred.size) - tp - fp - fn)


def summarize_metrics(metrics: Sequence[MaskMetrics]) -> dict[str, float | int]:
    """Means over images of every metric (ISIC 2017 ranks by ``mean_jaccard``), plus extras.

    ``median_jaccard`` and ``std_jaccard`` describe the spread; ``median_area_ratio`` the contour
    bias (:func:`median_area_ratio`); ``pooled_dice`` and
    ``pooled_jaccard`` sum the counts over all images first (dataset-level, as training's
    ``val_best_dice_at_threshold``).
    """
    if not metrics:
        return {"num_images": 0}
    summary: dict[str, float | int] = {"num_images": len(metrics)}
    for name in METRIC_NAMES:
        summary[f"mean_{name}"] = float(np.mean([getattr(m, name) for m in metrics]))
    jaccards = np.array([m.jaccard for m in metrics])
    summary["median_jaccard"] = float(np.median(jaccards))
    summary["std_jaccard"] = float(jaccards.std())
    summary["fraction_below_cutoff"] = float(np.mean(jaccards < ISIC2018_JACCARD_CUTOFF))
    summary["median_area_ratio"] = median_area_ratio(metrics)
    pooled = MaskMetrics(*(sum(getattr(m, k) for m in metrics) for k in ("tp", "fp", "fn", "tn")))
    summary["pooled_dice"] = pooled.dice
    summary["pooled_jaccard"] = pooled.jaccard
    return summary
