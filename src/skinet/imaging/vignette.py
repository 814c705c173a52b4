"""A circular field-of-view vignette on a uint8 image, in plain NumPy.

The training augmentation (:class:`skinet.augment.cpu.CircularVignette`) and the robustness
shifts (``skinet.evaluation.shifts``) both draw it; this module needs no albumentations, so
``skinet robustness`` runs in an install without the training extra.
"""

from __future__ import annotations

import numpy as np


def apply_circular_vignette(
    image: np.ndarray, center: tuple[float, float], radius: float, fill: int = 0
) -> np.ndarray:
    """Set every pixel outside a circle to ``fill``; a new uint8 array.

    Args:
        image: uint8 ``(H, W)`` or ``(H, W, C)``.
        center: Circle centre as fractions of ``(width, height)``; ``(0.5, 0.5)`` is the middle.
        radius: Circle radius as a fraction of half the shorter side (1.0 touches the short
            edges; above 1 only the corners darken).
        fill: Value of the pixels outside (every channel).

    A pixel is outside when its centre ``(x + 0.5, y + 0.5)`` is farther than the radius from
    ``(center[0] * W, center[1] * H)``.
    """
    if radius <= 0:
        raise ValueError(f"radius must be > 0, got {radius}")
    if not 0 <= fill <= 255:
        raise ValueError(f"fill must be in [0, 255], got {fill}")
    height, width = image.shape[:2]
    rows, cols = np.ogrid[:height, :width]
    radius_px = radius * min(height, width) / 2.0
    distance_sq = (cols + 0.5 - center[0] * width) ** 2 + (rows + 0.5 - center[1] * height) ** 2
    out = np.array(image, dtype=np.uint8, copy=True)
    out[distance_sq > radius_px**2] = fill
    return out
