"""The segmentation dataset, with an optional RAM cache of decoded, resized samples.

The cache is two contiguous uint8 arrays, images (N, H, W, 3) and masks (N, H, W), never one
Python object per sample. Forked DataLoader workers share those pages copy-on-write; a list of
per-sample arrays would instead have its reference counts touched on every access, which dirties
(copies) the pages holding the object headers in every worker, so worker RSS would grow each epoch.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np
import torch
from torch.utils.data import Dataset, get_worker_info

from skinet.datasets.layouts import Sample
from skinet.imaging.decode import load_pair_or_raise
from skinet.imaging.normalize import Normalizer
from skinet.imaging.preprocess import Preprocessing

if TYPE_CHECKING:
    import albumentations as A

from skinet.runtime.rank import launch_rank
from skinet.runtime.seeds import derive_seed

logger = logging.getLogger(__name__)


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
        seed = derive_seed(self._pipeline_seed, key[1], key[0], worker, *launch_rank())
        self.transform.set_random_seed(seed)  # type: ignore[union-attr]

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        image, mask = self.load_raw(index)
        if self.transform is not None:
            self._seed_for_epoch()
            out = self.transform(image=image, mask=mask)
            image, mask = out["image"], out["mask"]
        image_chw = self.normalizer(np.asarray(image))
        mask_1hw = (np.asarray(mask) > 0).astype(np.float32)[None]
        return torch.from_numpy(image_chw), torch.from_numpy(np.ascontiguousarray(mask_1hw))
