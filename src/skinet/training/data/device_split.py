"""The device-resident training split of ``TRAIN_CONFIG.augment_on: device``.

The training loader yields only sample indices (a ``(B,)`` long tensor): under DDP Lightning
puts a ``DistributedSampler`` over them, so each rank draws its own shard. The LightningModule
moves the cached uint8 arrays to its device once the Trainer runs (:meth:`DeviceResidentSplit.to`,
called from ``on_train_start``, so nothing touches CUDA before the Trainer starts its processes)
and turns each index batch into augmented, normalised tensors there
(:meth:`DeviceResidentSplit.make_batch`, from ``on_after_batch_transfer``).
"""

from __future__ import annotations

import logging

import numpy as np
import torch
from torch import Tensor
from torch.utils.data import Dataset

from skinet.augment.device_pipeline import DeviceAugmentation, build_device_augmentation
from skinet.config.experiment import ExperimentConfig
from skinet.training.data.dataset import SegmentationDataset
from skinet.training.data.samplers import EpochShuffleSampler, RepeatDataLoader

logger = logging.getLogger(__name__)


class DeviceResidentSplit(Dataset[int]):
    """Indices of a cached split; its pixels live on the accelerator during training.

    Args:
        images: Cached uint8 ``(N, H, W, 3)`` array (or memmap).
        masks: Cached uint8 ``(N, H, W)`` array in {0, 1}.
        augmentation: The batched pipeline, ending in normalisation.
    """

    def __init__(
        self, images: np.ndarray, masks: np.ndarray, augmentation: DeviceAugmentation
    ) -> None:
        if len(images) != len(masks):
            raise ValueError(f"images ({len(images)}) and masks ({len(masks)}) differ in length")
        self.host_images, self.host_masks = images, masks
        self.augmentation = augmentation
        self.images: Tensor | None = None
        self.masks: Tensor | None = None
        self._generator: torch.Generator | None = None
        self._stream_key: tuple[str, int, int] | None = None

    def __len__(self) -> int:
        return len(self.host_images)

    def __getitem__(self, index: int) -> int:
        return index

    def to(self, device: torch.device | str) -> DeviceResidentSplit:
        """Copy the split to ``device`` (once; a later call on the same device does nothing)."""
        device = torch.device(device)
        if self.images is None or self.images.device != device:
            self.images = torch.from_numpy(np.ascontiguousarray(self.host_images)).to(device)
            self.masks = torch.from_numpy(np.ascontiguousarray(self.host_masks)).to(device)
            logger.info(
                "training split on %s: %d samples, %.1f MB",
                device,
                len(self),
                (self.images.nbytes + self.masks.nbytes) / 2**20,
            )
        return self

    def release(self) -> None:
        """Drop the device copy (the host arrays stay)."""
        self.images = self.masks = None
        self._generator = self._stream_key = None

    def make_batch(self, indices: Tensor, epoch: int, rank: int = 0) -> tuple[Tensor, Tensor]:
        """Augmented, normalised ``(images, masks)`` of ``indices`` on the split's device.

        The random stream is restarted at every new ``epoch`` (seeded from the transform seed,
        the epoch and ``rank``), so a resumed run, or the same epoch run again, augments alike.
        """
        if self.images is None or self.masks is None:
            raise RuntimeError("DeviceResidentSplit.make_batch before .to(device)")
        device = self.images.device
        key = (str(device), epoch, rank)
        if self._generator is None or self._stream_key != key:
            self._generator = self.augmentation.make_generator(device, epoch, rank)
            self._stream_key = key
        indices = indices.to(device)
        return self.augmentation(self.images[indices], self.masks[indices], self._generator)


def find_device_split(loader: object) -> DeviceResidentSplit | None:
    """The :class:`DeviceResidentSplit` behind a training loader, else ``None``."""
    dataset = getattr(loader, "dataset", None)
    return dataset if isinstance(dataset, DeviceResidentSplit) else None


def build_device_split(
    dataset: SegmentationDataset, augmentation: DeviceAugmentation
) -> DeviceResidentSplit:
    """The device-resident version of a cached training dataset.

    Raises:
        ValueError: the dataset holds no cached arrays.
    """
    if dataset.images is None or dataset.masks is None:
        raise ValueError(
            f"TRAIN_CONFIG.augment_on: device needs the cached {dataset.split or 'training'} "
            "split; build it with build_dataset (which caches it for augment_on: device)"
        )
    return DeviceResidentSplit(dataset.images, dataset.masks, augmentation)


def build_device_train_loader(
    cfg: ExperimentConfig, dataset: SegmentationDataset, drop_last: bool
) -> RepeatDataLoader:
    """The training loader of ``augment_on: device``: shuffled index batches, no workers.

    The order is the worker path's: an :class:`EpochShuffleSampler` keyed to the dataset's
    ``(epoch, seed)``, so a resumed run shuffles as the uninterrupted one did. Lightning
    replaces it with a ``DistributedSampler`` under DDP (each rank its own shard, reshuffled
    every epoch).
    """
    split = build_device_split(dataset, build_device_augmentation(cfg))
    return RepeatDataLoader(
        split,
        batch_size=cfg.train.batch_size,
        sampler=EpochShuffleSampler(dataset),
        drop_last=drop_last,
        num_workers=0,
    )
