"""Boundary metrics of a predicted mask: HD95 and the average symmetric surface distance.

Definitions follow MONAI's ``compute_hausdorff_distance(percentile=95)`` and
``compute_average_surface_distance(symmetric=True)``:

* The surface of a mask is its boundary pixels: lesion pixels with a 4-neighbour outside the
  lesion (``mask & ~binary_erosion(mask)``); pixels on the image border count as boundary.
* ``d(a, B)`` is the Euclidean distance from a boundary pixel ``a`` of one mask to the nearest
  boundary pixel of the other (centre to centre, coordinates scaled by the pixel spacing).
  MONAI reads it off ``scipy.ndimage.distance_transform_edt`` of the whole image; the same exact
  nearest-neighbour distances come here from a ``scipy.spatial.cKDTree`` over the boundary
  pixels, which costs the perimeter instead of the area (0.6 s instead of 10 s for a 6000x4000
  dermoscopy image on a shared 2-core CPU).
* HD95 is the larger of the two directed 95th percentiles (``numpy.percentile``, linear
  interpolation): ``max(P95{d(a, ∂G) : a ∈ ∂P}, P95{d(g, ∂P) : g ∈ ∂G})``.
* ASSD is the mean over both boundaries pooled: ``(Σ d(a, ∂G) + Σ d(g, ∂P)) / (|∂P| + |∂G|)``.

Empty masks: both empty is perfect agreement, HD95 = ASSD = 0 (the convention Jaccard 1 and
Dice 1 follow here). Exactly one empty leaves the distance undefined: MONAI returns ``inf`` or
``nan`` there and its reduction drops ``nan`` and counts what remains; here the value is ``nan``,
means skip it and the summary counts such images (``num_surface_undefined``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import cv2
import numpy as np
from scipy.spatial import cKDTree

HD_PERCENTILE = 95.0


@dataclass(frozen=True)
class SurfaceMetrics:
    """HD95 and ASSD of one image in pixels and, when a spacing was given, in millimetres."""

    hd95_px: float
    assd_px: float
    hd95_mm: float | None = None
    assd_mm: float | None = None

    @property
    def defined(self) -> bool:
        """False when exactly one of the masks is empty (the distances are ``nan``)."""
        return not math.isnan(self.hd95_px)

    def as_row(self, with_mm: bool) -> dict[str, float]:
        """Flat mapping for CSV rows; the mm columns only when ``with_mm``."""
        row = {"hd95_px": self.hd95_px, "assd_px": self.assd_px}
        if with_mm:
            row["hd95_mm"] = math.nan if self.hd95_mm is None else self.hd95_mm
            row["assd_mm"] = math.nan if self.assd_mm is None else self.assd_mm
        return row


def check_spacing(spacing_mm: float | Sequence[float] | None) -> tuple[float, float] | None:
    """``(row, column)`` pixel spacing in mm from one isotropic value or two; ``None`` stays.

    Raises:
        ValueError: Not one or two finite positive numbers.
    """
    if spacing_mm is None:
        return None
    values = [float(spacing_mm)] if isinstance(spacing_mm, int | float) else list(spacing_mm)
    if len(values) == 1:
        values *= 2
    if len(values) != 2 or not all(math.isfinite(v) and v > 0 for v in values):
        raise ValueError(
            f"pixel spacing must be one or two positive numbers (mm per pixel: row, column), "
            f"got {spacing_mm!r}"
        )
    return values[0], values[1]


_CROSS = cv2.getStructuringElement(cv2.MORPH_CROSS, (3, 3))


def _boundary_points(mask: np.ndarray) -> np.ndarray:
    """``(N, 2)`` float ``(row, column)`` of the boundary pixels of a non-empty bool mask."""
    pixels = mask.astype(np.uint8)
    # Outside the image is background, as scipy.ndimage.binary_erosion's border_value=0.
    inner = cv2.erode(pixels, _CROSS, borderType=cv2.BORDER_CONSTANT, borderValue=0)
    columns_rows = cv2.findNonZero(pixels - inner).reshape(-1, 2)
    return columns_rows[:, ::-1].astype(np.float64)


def _hd95_and_assd(
    pred_points: np.ndarray, target_points: np.ndarray, sampling: tuple[float, float]
) -> tuple[float, float]:
    scale = np.asarray(sampling)
    pred_points, target_points = pred_points * scale, target_points * scale
    to_target = cKDTree(target_points).query(pred_points)[0]
    to_pred = cKDTree(pred_points).query(target_points)[0]
    hd95 = max(np.percentile(to_target, HD_PERCENTILE), np.percentile(to_pred, HD_PERCENTILE))
    assd = (to_target.sum() + to_pred.sum()) / (to_target.size + to_pred.size)
    return float(hd95), float(assd)


def compute_surface_metrics(
    pred: np.ndarray, target: np.ndarray, spacing_mm: float | Sequence[float] | None = None
) -> SurfaceMetrics:
    """HD95 and ASSD of a predicted mask against the ground truth (same ``(H, W)``).

    Non-zero pixels are lesion. See the module docstring for the definitions and the empty-mask
    convention.

    Args:
        pred: Predicted mask.
        target: Ground-truth mask.
        spacing_mm: Millimetres per pixel, isotropic or ``(row, column)``; adds the mm values.

    Raises:
        ValueError: The shapes differ, or the spacing is not positive.
    """
    spacing = check_spacing(spacing_mm)
    if pred.shape != target.shape or pred.ndim != 2:
        raise ValueError(
            f"prediction {pred.shape} and ground truth {target.shape} must be the same (H, W)"
        )
    pred, target = pred > 0, target > 0
    pred_any, target_any = bool(pred.any()), bool(target.any())
    if not pred_any and not target_any:
        zero = None if spacing is None else 0.0
        return SurfaceMetrics(0.0, 0.0, zero, zero)
    if pred_any != target_any:
        nan = None if spacing is None else math.nan
        return SurfaceMetrics(math.nan, math.nan, nan, nan)
    pred_edges, target_edges = _boundary_points(pred), _boundary_points(target)
    hd95_px, assd_px = _hd95_and_assd(pred_edges, target_edges, (1.0, 1.0))
    if spacing is None:
        return SurfaceMetrics(hd95_px, assd_px)
    if spacing[0] == spacing[1]:
        return SurfaceMetrics(hd95_px, assd_px, hd95_px * spacing[0], assd_px * spacing[0])
    return SurfaceMetrics(hd95_px, assd_px, *_hd95_and_assd(pred_edges, target_edges, spacing))


def summarize_surface_metrics(
    metrics: Sequence[SurfaceMetrics], with_mm: bool
) -> dict[str, float | int | None]:
    """Means and medians over the images whose distances are defined, and how many are not."""
    defined = [m for m in metrics if m.defined]
    summary: dict[str, float | int | None] = {"num_surface_undefined": len(metrics) - len(defined)}
    names = ["hd95_px", "assd_px"] + (["hd95_mm", "assd_mm"] if with_mm else [])
    for name in names:
        values = np.array([getattr(m, name) for m in defined], dtype=float)
        summary[f"mean_{name}"] = float(values.mean()) if values.size else None
        summary[f"median_{name}"] = float(np.median(values)) if values.size else None
    return summary
