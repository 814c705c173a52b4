"""Per-channel mean and standard deviation of a dataset's images (for ``normalization_mode``)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import numpy as np

from skinet.imaging.decode import read_image
from skinet.imaging.preprocess import Preprocessing, preprocess_image


@dataclass(frozen=True)
class ChannelStats:
    """RGB mean and std on [0, 1] over every pixel of every image."""

    mean: tuple[float, float, float]
    std: tuple[float, float, float]
    num_images: int
    num_pixels: int
    color_constancy: str = "none"
    """Colour constancy applied before the statistics were taken."""

    def to_yaml(self) -> str:
        """A ``DATA_CONFIG`` block to paste into a config file."""
        mean = ", ".join(f"{v:.4f}" for v in self.mean)
        std = ", ".join(f"{v:.4f}" for v in self.std)
        method = self.color_constancy
        corrected = "" if method == "none" else f"  color_constancy: {method}\n"
        return (
            f"# {self.num_images} images, {self.num_pixels} pixels\n"
            "DATA_CONFIG:\n"
            '  normalization_mode: "standard"\n'
            f"{corrected}"
            f"  mean: [{mean}]\n"
            f"  std: [{std}]\n"
        )


def _sums(path: Path, preprocessing: Preprocessing) -> tuple[np.ndarray, np.ndarray, int]:
    image, _ = preprocess_image(read_image(path), preprocessing)
    pixels = image.reshape(-1, 3).astype(np.float64) / 255.0
    return pixels.sum(axis=0), np.square(pixels).sum(axis=0), len(pixels)


def compute_channel_stats(
    image_paths: Sequence[Path],
    threads: int = 4,
    progress: bool = True,
    preprocessing: Preprocessing | None = None,
) -> ChannelStats:
    """Mean/std per RGB channel over all pixels (images at their native size).

    ``preprocessing`` (``DATA_CONFIG``'s, from
    :func:`~skinet.imaging.preprocess.build_preprocessing`) applies its colour constancy first, so
    the statistics describe the corrected images the model is fed; resizing and letterbox
    padding are left out (padding would bias the mean towards ``pad_value``).
    Sums and sums of squares are accumulated in float64, which is exact enough for millions of
    pixels per image and thousands of images.
    """
    if not image_paths:
        raise ValueError("no images to compute statistics over")
    total = np.zeros(3)
    total_sq = np.zeros(3)
    count = 0
    with ThreadPoolExecutor(threads) as pool:
        native = (preprocessing or Preprocessing(None)).at_native_size()
        results: Iterable[tuple[np.ndarray, np.ndarray, int]] = pool.map(
            partial(_sums, preprocessing=native), image_paths
        )
        if progress:
            from rich.console import Console
            from rich.progress import track

            results = track(
                results,
                total=len(image_paths),
                description="computing mean/std",
                console=Console(stderr=True),
                transient=True,
            )
        for s, sq, n in results:
            total += s
            total_sq += sq
            count += n
    mean = total / count
    std = np.sqrt(np.maximum(total_sq / count - mean**2, 0.0))
    return ChannelStats(
        tuple(float(v) for v in mean),  # type: ignore[arg-type]
        tuple(float(v) for v in std),  # type: ignore[arg-type]
        len(image_paths),
        count,
        native.color_constancy,
    )
