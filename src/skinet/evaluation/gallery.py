"""The failure gallery of ``skinet evaluate``: the N worst images by Jaccard or by area ratio."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import cv2
import numpy as np

from skinet.evaluation.figures import plot_overlay_grid, save_figure
from skinet.evaluation.options import GALLERY_ORDERS
from skinet.metrics.masks import MaskMetrics
from skinet.metrics.surface import SurfaceMetrics

GALLERY_FILE = "failure_gallery.png"
THUMBNAIL_SIDE = 320
"""Longest side of a gallery tile in pixels; larger images are shrunk to it while scoring."""


@dataclass(frozen=True)
class GalleryEntry:
    """One tile: thumbnails of the image (``None`` for mask folders), ground truth, prediction."""

    image_id: str
    metrics: MaskMetrics
    surface: SurfaceMetrics | None
    image: np.ndarray | None
    mask: np.ndarray
    pred: np.ndarray


def _thumbnail(array: np.ndarray, interpolation: int) -> np.ndarray:
    height, width = array.shape[:2]
    scale = THUMBNAIL_SIDE / max(height, width)
    if scale >= 1.0:
        return array
    size = (max(1, round(width * scale)), max(1, round(height * scale)))
    return cv2.resize(array, size, interpolation=interpolation)


def area_ratio_badness(metrics: MaskMetrics) -> float:
    """How far the predicted area is from the true one: ``|log(area ratio)|``.

    Over- and under-segmentation by the same factor rank alike; a lesion predicted on an image
    without one is infinitely bad, and an empty prediction of an empty image is perfect.
    """
    if metrics.tp + metrics.fn == 0:
        return math.inf if metrics.fp else 0.0
    predicted = metrics.tp + metrics.fp
    return math.inf if predicted == 0 else abs(math.log(metrics.area_ratio))


@dataclass
class FailureGallery:
    """Keeps thumbnails of the ``size`` worst images seen so far, by ``order``, then ID.

    ``order`` is one of :data:`GALLERY_ORDERS`. Only thumbnails are kept, so memory stays at
    ``size`` tiles whatever the dataset size and image resolution.
    """

    size: int
    order: str = "jaccard"
    entries: list[GalleryEntry] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.size < 1:
            raise ValueError(f"gallery size must be at least 1, got {self.size}")
        if self.order not in GALLERY_ORDERS:
            raise ValueError(f"gallery order must be one of {GALLERY_ORDERS}, got {self.order!r}")

    def offer(
        self,
        image_id: str,
        metrics: MaskMetrics,
        surface: SurfaceMetrics | None,
        pred: np.ndarray,
        target: np.ndarray,
        image: np.ndarray | None = None,
    ) -> None:
        """Keep this image if it is among the worst so far."""
        key = (self._badness(metrics), image_id)
        if len(self.entries) == self.size and key >= self._key(self.entries[-1]):
            return
        entry = GalleryEntry(
            image_id,
            metrics,
            surface,
            None if image is None else _thumbnail(image, cv2.INTER_AREA),
            _thumbnail((target > 0).astype(np.uint8), cv2.INTER_NEAREST),
            _thumbnail((pred > 0).astype(np.uint8), cv2.INTER_NEAREST),
        )
        self.entries = sorted([*self.entries, entry], key=self._key)[: self.size]

    def _badness(self, metrics: MaskMetrics) -> float:
        """Smaller is worse."""
        return metrics.jaccard if self.order == "jaccard" else -area_ratio_badness(metrics)

    def _key(self, entry: GalleryEntry) -> tuple[float, str]:
        return self._badness(entry.metrics), entry.image_id

    def write(self, path: Path, threshold: float | None = None) -> Path | None:
        """Draw the tiles (worst first) with their scores to ``path``; ``None`` when empty."""
        if not self.entries:
            return None
        titles = [_title(entry) for entry in self.entries]
        figure = plot_overlay_grid(
            [entry.image for entry in self.entries],
            [entry.mask for entry in self.entries],
            [entry.pred for entry in self.entries],
            titles,
            f"{len(self.entries)} worst images by "
            + ("Jaccard" if self.order == "jaccard" else "area ratio (predicted / true area)"),
            threshold=threshold,
        )
        return save_figure(figure, path)


def _title(entry: GalleryEntry) -> str:
    metrics, surface = entry.metrics, entry.surface
    ratio = metrics.area_ratio
    area = "no lesion" if math.isnan(ratio) else f"area {ratio:.2f}x"
    line = f"J {metrics.jaccard:.3f}  D {metrics.dice:.3f}  {area}"
    if surface is not None:
        if surface.hd95_mm is not None:
            hd95, assd, unit = surface.hd95_mm, surface.assd_mm, "mm"
        else:
            hd95, assd, unit = surface.hd95_px, surface.assd_px, "px"
        if math.isnan(hd95):
            line += "\nHD95/ASSD undefined (one mask empty)"
        else:
            digits = 2 if unit == "mm" else 1
            line += f"\nHD95 {hd95:.{digits}f} {unit}  ASSD {assd:.{digits}f} {unit}"
    return f"{entry.image_id}\n{line}"
