"""Image-only augmentations that albumentations lacks."""

from __future__ import annotations

import numpy as np


def apply_circular_vignette(
    image: np.ndarray, center: tuple[float, float], radius: float, fill: int = 0
) -> np.ndarray:
    """Set every pixel outside a circle to ``fill``, as the dark field-of-view border of a
    full-frame dermatoscope image; the mask is not touched.

    Args:
        image: uint8 ``(H, W)`` or ``(H, W, C)``.
        center: Circle centre as fractions of ``(width, height)``.
        radius: Circle radius as a fraction of half the shorter side (1.0 touches the shorter
            sides when centred).
        fill: Value of the pixels outside the circle.

    Returns:
        A new uint8 array of the image's shape.
    """
    if image.dtype != np.uint8 or image.ndim not in (2, 3):
        raise ValueError(f"image must be uint8 (H, W[, C]), got {image.dtype} {image.shape}")
    if radius <= 0:
        raise ValueError(f"radius must be > 0, got {radius}")
    if not 0 <= fill <= 255:
        raise ValueError(f"fill must be in [0, 255], got {fill}")
    height, width = image.shape[:2]
    center_x, center_y = center[0] * width, center[1] * height
    radius_px = radius * min(height, width) / 2
    # Distances from pixel centres, so a centred circle is symmetric on even and odd sizes.
    ys = np.arange(height, dtype=np.float64)[:, None] + 0.5 - center_y
    xs = np.arange(width, dtype=np.float64)[None, :] + 0.5 - center_x
    outside = xs**2 + ys**2 > radius_px**2
    out = image.copy()
    out[outside] = fill
    return out
