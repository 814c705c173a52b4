"""Mask post-processing with OpenCV: largest connected component and hole filling.

Masks are uint8 ``(H, W)`` arrays with values ``{0, 1}`` (any non-zero value counts as lesion);
every function returns a new ``{0, 1}`` uint8 array of the same shape.
"""

from __future__ import annotations

import cv2
import numpy as np


def _binary(mask: np.ndarray) -> np.ndarray:
    if mask.ndim != 2:
        raise ValueError(f"mask must be 2-D (H, W), got shape {mask.shape}")
    return (mask > 0).astype(np.uint8)


def keep_largest_component(mask: np.ndarray) -> np.ndarray:
    """Keep only the largest 8-connected foreground component (an empty mask stays empty)."""
    binary = _binary(mask)
    count, labels, stats, _ = cv2.connectedComponentsWithStats(binary, connectivity=8)
    if count <= 2:  # background plus at most one component
        return binary
    # Label 0 is the background; ties go to the lowest label, so the result is deterministic.
    largest = 1 + int(np.argmax(stats[1:, cv2.CC_STAT_AREA]))
    return (labels == largest).astype(np.uint8)


def fill_holes(mask: np.ndarray) -> np.ndarray:
    """Fill background regions enclosed by foreground (not connected to the image border)."""
    binary = _binary(mask)
    contours, _ = cv2.findContours(binary, cv2.RETR_EXTERNAL, cv2.CHAIN_APPROX_NONE)
    filled = np.zeros_like(binary)
    cv2.drawContours(filled, contours, -1, color=1, thickness=cv2.FILLED)
    return filled | binary


def postprocess_mask(
    mask: np.ndarray, keep_largest: bool = False, fill: bool = False
) -> np.ndarray:
    """Apply the requested steps in a fixed order: largest component, then hole filling."""
    out = _binary(mask)
    if keep_largest:
        out = keep_largest_component(out)
    if fill:
        out = fill_holes(out)
    return out
