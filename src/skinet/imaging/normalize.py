"""Albumentations pipeline from ``TRANSFORM_CONFIG`` and normalisation to float tensors.

Albumentations is imported only to build the training pipeline, so the normaliser serves
prediction in an install without the training extra.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from skinet.config.data import NormalizationMode
    from skinet.config.experiment import ExperimentConfig


@dataclass(frozen=True)
class Normalizer:
    """uint8 RGB (H, W, 3) -> float32 (3, H, W), by fixed mean/std or per image and channel."""

    mode: NormalizationMode
    mean: tuple[float, float, float]
    std: tuple[float, float, float]
    eps: float = 1e-6

    def __call__(self, image: np.ndarray) -> np.ndarray:
        pixels = image.astype(np.float32) * np.float32(1 / 255)
        if self.mode == "standard":
            mean = np.asarray(self.mean, np.float32)
            std = np.asarray(self.std, np.float32)
        else:
            mean = pixels.mean(axis=(0, 1))
            std = pixels.std(axis=(0, 1))
        pixels -= mean
        pixels /= np.maximum(std, self.eps)
        return np.ascontiguousarray(pixels.transpose(2, 0, 1))

    def denormalize(self, chw: np.ndarray) -> np.ndarray:
        """Back to uint8 RGB (H, W, 3) for display (per-image mode is min-max stretched)."""
        hwc = np.asarray(chw, np.float32).transpose(1, 2, 0)
        if self.mode == "standard":
            rgb = hwc * np.asarray(self.std, np.float32) + np.asarray(self.mean, np.float32)
        else:
            low, high = hwc.min(axis=(0, 1)), hwc.max(axis=(0, 1))
            rgb = (hwc - low) / np.maximum(high - low, self.eps)
        return np.clip(rgb * 255 + 0.5, 0, 255).astype(np.uint8)


def build_normalizer(cfg: ExperimentConfig) -> Normalizer:
    """The :class:`Normalizer` of ``DATA_CONFIG``."""
    data = cfg.data
    return Normalizer(data.normalization_mode, tuple(data.mean), tuple(data.std))  # type: ignore[arg-type]
