"""The segmentation dataset, with an optional RAM cache of decoded, resized samples.

The cache is two contiguous uint8 arrays, images (N, H, W, 3) and masks (N, H, W), never one
Python object per sample. Forked DataLoader workers share those pages copy-on-write; a list of
per-sample arrays would instead have its reference counts touched on every access, which dirties
(copies) the pages holding the object headers in every worker, so worker RSS would grow each epoch.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch
from torch.utils.data import Dataset, get_worker_info

from skinet.data.errors import Problem
from skinet.data.io import MASK_THRESHOLD, load_pair, load_pair_or_raise
from skinet.data.layouts import Sample
from skinet.data.preprocess import Preprocessing, as_preprocessing
from skinet.data.transforms import Normalizer

if TYPE_CHECKING:
    import albumentations as A

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

    ``preprocessing`` is :func:`~skinet.data.preprocess.build_preprocessing`'s result, or an
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

    def work(i: int) -> list[Problem]:
        placed = spec if keep else None  # a check only: skip the preprocessing
        sample = samples[i]
        result = load_pair(sample.image_path, sample.mask_path, placed, split, grey_masks)
        if isinstance(result, list):
            return result
        if images is not None and masks is not None:
            images[i], masks[i] = result
        return []

    with ThreadPoolExecutor(_decode_threads()) as pool:
        results: Iterator[list[Problem]] = pool.map(work, range(count))
        if count >= PROGRESS_MIN_SAMPLES:
            results = _with_progress(results, count, description or f"decoding {split or ''}")
        for found in results:
            problems += found
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
    return DecodedSplit(images, masks, problems)


def _with_progress(items: Iterator[list[Problem]], total: int, description: str) -> Iterator:
    from rich.console import Console
    from rich.progress import Progress

    with Progress(console=Console(stderr=True), transient=True) as progress:
        task = progress.add_task(description, total=total)
        for item in items:
            yield item
            progress.advance(task)


class SegmentationDataset(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    """Image/mask pairs preprocessed to ``image_size``, augmented and normalised.

    Items are ``(image, mask)``: float32 (3, H, W) normalised and float32 (1, H, W) in {0, 1}.

    Args:
        samples: The pairs, in a fixed order.
        image_size: Side of the square the pairs are resized to once.
        normalizer: uint8 RGB -> normalised float32 CHW.
        transform: Albumentations pipeline applied to uint8 image and {0,1} mask (training only).
        images: Cached uint8 (N, H, W, 3) array; ``None`` reads from disk per access.
        masks: Cached uint8 (N, H, W) array in {0, 1}; given together with ``images``.
        split: Name used in messages.
        preprocessing: Resize mode, colour constancy and JPEG decode scale of uncached reads
            (``None``: a plain squash to ``image_size``); cached arrays were made with the same.
    """

    def __init__(
        self,
        samples: Sequence[Sample],
        image_size: int,
        normalizer: Normalizer,
        transform: A.Compose | Callable[..., dict] | None = None,
        images: np.ndarray | None = None,
        masks: np.ndarray | None = None,
        split: str = "",
        preprocessing: Preprocessing | None = None,
    ) -> None:
        if (images is None) != (masks is None):
            raise ValueError("images and masks must be cached together")
        if (
            images is not None
            and masks is not None
            and not len(images) == len(masks) == len(samples)
        ):
            raise ValueError("cached arrays and samples differ in length")
        self.samples = list(samples)
        self.image_size = image_size
        self.normalizer = normalizer
        self.transform = transform
        self.images = images
        self.masks = masks
        self.split = split
        self.preprocessing = preprocessing or Preprocessing(image_size)
        # (epoch, seed) shared with DataLoader workers; see set_augmentation_epoch.
        self._augmentation_key: torch.Tensor | None = None
        self._seeded_for: tuple[int, int] | None = None
        # The configured pipeline seed; set_random_seed (here and in seed_worker) replaces it.
        self._pipeline_seed = int(getattr(transform, "seed", None) or 0) % 2**63

    @property
    def cached(self) -> bool:
        """Whether pixels come from the RAM cache."""
        return self.images is not None

    @property
    def cache_nbytes(self) -> int:
        """Bytes held by the RAM cache (0 when not cached)."""
        if self.images is None or self.masks is None:
            return 0
        return int(self.images.nbytes + self.masks.nbytes)

    def __len__(self) -> int:
        return len(self.samples)

    def load_raw(self, index: int) -> tuple[np.ndarray, np.ndarray]:
        """The preprocessed, un-augmented uint8 image (H, W, 3) and {0,1} mask (H, W)."""
        if self.images is not None and self.masks is not None:
            return self.images[index], self.masks[index]
        sample = self.samples[index]
        return load_pair_or_raise(sample.image_path, sample.mask_path, self.preprocessing)

    def set_augmentation_epoch(self, epoch: int, seed: int) -> None:
        """Seed the augmentations of the items loaded from now on from ``(seed, epoch)``.

        Each process that loads items (every DataLoader worker, or the main process with
        ``num_workers=0``) re-seeds the transform on its first item of a new epoch from the
        pipeline's own seed, ``seed``, ``epoch``, its worker id and its distributed rank. An
        epoch's augmentations then do not depend on what earlier epochs drew, so a resumed
        run's workers, started afresh, draw what the uninterrupted run's workers drew.

        The pair lives in shared memory: call this before the workers start (or the epoch's
        iterator is created) and persistent workers see later updates.
        """
        if self._augmentation_key is None:
            self._augmentation_key = torch.zeros(2, dtype=torch.int64).share_memory_()
        self._augmentation_key[0] = epoch
        self._augmentation_key[1] = seed

    @property
    def augmentation_key(self) -> tuple[int, int] | None:
        """The ``(epoch, seed)`` of :meth:`set_augmentation_epoch`, ``None`` before any call."""
        key = self._augmentation_key
        return None if key is None else (int(key[0]), int(key[1]))

    def _seed_for_epoch(self) -> None:
        key = self.augmentation_key
        if key is None or key == self._seeded_for or not hasattr(self.transform, "set_random_seed"):
            return
        self._seeded_for = key
        info = get_worker_info()
        worker = info.id if info is not None else 0
        rank = int(os.environ.get("RANK", os.environ.get("LOCAL_RANK", "0")) or 0)
        entropy = [self._pipeline_seed, key[1] % 2**63, key[0], worker, rank]
        self.transform.set_random_seed(int(np.random.SeedSequence(entropy).generate_state(1)[0]))  # type: ignore[union-attr]

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        image, mask = self.load_raw(index)
        if self.transform is not None:
            self._seed_for_epoch()
            out = self.transform(image=image, mask=mask)
            image, mask = out["image"], out["mask"]
        image_chw = self.normalizer(np.asarray(image))
        mask_1hw = (np.asarray(mask) > 0).astype(np.float32)[None]
        return torch.from_numpy(image_chw), torch.from_numpy(np.ascontiguousarray(mask_1hw))
