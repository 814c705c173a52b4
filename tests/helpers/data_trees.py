"""Helpers writing small image/mask files and layout trees with cv2.imwrite."""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np


def make_image(height: int = 40, width: int = 48, seed: int = 0) -> np.ndarray:
    """A BGR uint8 image with a dark disc (the 'lesion') on a light background."""
    rng = np.random.default_rng(seed)
    image = np.full((height, width, 3), 200, np.uint8)
    image += rng.integers(0, 20, image.shape, dtype=np.uint8)
    cv2.circle(image, (width // 2, height // 2), min(height, width) // 4, (60, 80, 120), -1)
    return image


def make_mask(height: int = 40, width: int = 48) -> np.ndarray:
    """The 0/255 mask of :func:`make_image`'s disc."""
    mask = np.zeros((height, width), np.uint8)
    cv2.circle(mask, (width // 2, height // 2), min(height, width) // 4, 255, -1)
    return mask


def write_pair(
    image_path: Path, mask_path: Path, seed: int = 0, size: tuple[int, int] = (40, 48)
) -> None:
    image_path.parent.mkdir(parents=True, exist_ok=True)
    mask_path.parent.mkdir(parents=True, exist_ok=True)
    assert cv2.imwrite(str(image_path), make_image(*size, seed=seed))
    assert cv2.imwrite(str(mask_path), make_mask(*size))


def build_official(
    root: Path, folders: dict[str, tuple[str, str]], counts: dict[str, int], ext: str = ".jpg"
) -> Path:
    """An official ISIC-style tree with ``counts[split]`` pairs per split."""
    next_id = 0
    for split, count in counts.items():
        image_dir, mask_dir = (root / name for name in folders[split])
        for _ in range(count):
            stem = f"ISIC_{next_id:07d}"
            write_pair(image_dir / f"{stem}{ext}", mask_dir / f"{stem}_segmentation.png", next_id)
            next_id += 1
    return root
