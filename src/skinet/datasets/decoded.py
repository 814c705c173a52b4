"""Decoding a split's image/mask pairs into two contiguous uint8 arrays, in threads, with
every unreadable file reported at once.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from skinet.datasets.layouts import Sample
from skinet.imaging.decode import MASK_THRESHOLD, load_pair
from skinet.imaging.errors import Problem
from skinet.imaging.preprocess import Preprocessing, as_preprocessing

if TYPE_CHECKING:
    pass

logger = logging.getLogger(__name__)

PROGRESS_MIN_SAMPLES = 200
"""Splits at least this large show a progress bar while they are decoded."""


@dataclass
class DecodedSplit:
    """Result of decoding one split: arrays when cached, and every problem found."""

    images: np.ndarray | None
    masks: np.ndarray | None
    problems: list[Problem]


def _decode_threads() -> int:
    # OpenCV releases the GIL while decoding and resizing, so threads scale without pickling.
    return max(1, min(8, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 2))


def decode_split(
    samples: Sequence[Sample],
    preprocessing: Preprocessing | int,
    *,
    keep: bool,
    split: str | None = None,
    description: str | None = None,
    out: tuple[np.ndarray, np.ndarray] | None = None,
) -> DecodedSplit:
    """Decode, check and preprocess every pair; keep the pixels only when ``keep`` (the RAM cache).

    ``preprocessing`` is :func:`~skinet.imaging.preprocess.build_preprocessing`'s result, or an
    ``int`` for a plain squash to that size. All pairs are visited even after a problem, so the
    caller can report every bad file at once (a check reads each file in full). ``out`` receives
    the pixels (e.g. the memory-mapped files of the disk cache) instead of new arrays.
    """
    spec = as_preprocessing(preprocessing)
    if spec.image_size is None:
        raise ValueError("decode_split needs an image_size (the side of the cached arrays)")
    image_size = spec.image_size
    count = len(samples)
    images: np.ndarray | None = None
    masks: np.ndarray | None = None
    if out is not None:
        images, masks = out
    elif keep:
        images = np.empty((count, image_size, image_size, 3), np.uint8)
        masks = np.empty((count, image_size, image_size), np.uint8)
    problems: list[Problem] = []
    grey_masks: list[Path] = []
    empty_masks: list[Path] = []

    def work(i: int) -> list[Problem]:
        placed = spec if keep else None  # a check only: skip the preprocessing
        sample = samples[i]
        result = load_pair(sample.image_path, sample.mask_path, placed, split, grey_masks)
        if isinstance(result, list):
            return result
        if not result[1].any():
            empty_masks.append(sample.mask_path)
        if images is not None and masks is not None:
            images[i], masks[i] = result
        return []

    with ThreadPoolExecutor(_decode_threads()) as pool:
        results: Iterator[list[Problem]] = pool.map(work, range(count))
        if count >= PROGRESS_MIN_SAMPLES:
            results = _with_progress(results, count, description or f"decoding {split or ''}")
        for found in results:
            problems += found
    _warn_about_masks(count, split, grey_masks, empty_masks)
    return DecodedSplit(images, masks, problems)


def _warn_about_masks(
    count: int, split: str | None, grey_masks: list[Path], empty_masks: list[Path]
) -> None:
    """Warn once per split about masks that were grey (binarised) or all empty."""
    if grey_masks:
        logger.warning(
            "%d of %d mask(s)%s have grey values between 0 and 255 (e.g. %s); they were binarised "
            "at >= %d. Fine for anti-aliased edges; threshold probability or grey maps yourself.",
            len(grey_masks),
            count,
            f" of split {split}" if split else "",
            min(grey_masks),
            MASK_THRESHOLD,
        )
    if count > 1 and len(empty_masks) == count:
        logger.warning(
            "every one of the %d mask(s)%s is empty (no lesion pixel, e.g. %s): a model would "
            "learn to find nothing. Are the masks saved with values the reader does not take for "
            "lesion? Open one in an image viewer",
            count,
            f" of split {split}" if split else "",
            min(empty_masks),
        )


def _with_progress(items: Iterator[list[Problem]], total: int, description: str) -> Iterator:
    from rich.console import Console
    from rich.progress import Progress

    with Progress(console=Console(stderr=True), transient=True) as progress:
        task = progress.add_task(description, total=total)
        for item in items:
            yield item
            progress.advance(task)
