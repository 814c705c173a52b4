"""``build_dataloaders``: config -> checked datasets -> ``RepeatDataLoader`` per split.

Roots and pairing live in :mod:`skinet.datasets.locate`, checks in
:mod:`skinet.datasets.verify`, the
disk cache in :mod:`skinet.datasets.cache`; this module only builds datasets and loaders.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import numpy as np

from skinet.augment.cpu import build_train_transform
from skinet.config.experiment import ExperimentConfig
from skinet.datasets.cache import load_or_build_split, resolve_cache_dir
from skinet.datasets.decoded import DecodedSplit, decode_split
from skinet.datasets.layouts import Sample
from skinet.datasets.locate import index_dataset
from skinet.datasets.verify import decode_problems, split_problems
from skinet.imaging.errors import DatasetError, Problem
from skinet.imaging.normalize import build_normalizer
from skinet.imaging.preprocess import Preprocessing, build_preprocessing
from skinet.runtime.devices import TrainSettings, resolve_train_settings
from skinet.training.data.dataset import SegmentationDataset
from skinet.training.data.samplers import (
    EpochShuffleSampler,
    EvalDistributedSampler,
    RepeatDataLoader,
)

logger = logging.getLogger(__name__)


@dataclass
class DataLoaders:
    """Loaders and datasets of the three splits (``test`` is ``None`` without a test split)."""

    train: RepeatDataLoader
    val: RepeatDataLoader
    test: RepeatDataLoader | None
    train_dataset: SegmentationDataset
    val_dataset: SegmentationDataset
    test_dataset: SegmentationDataset | None


def build_dataset(
    cfg: ExperimentConfig,
    split: str,
    samples: list[Sample] | None = None,
) -> SegmentationDataset:
    """The checked dataset of one split (``train`` is augmented, the others are not).

    Raises:
        DatasetError: listing every problem of the split.
    """
    if samples is None:
        index, splits = index_dataset(cfg)
        problems = [p for p in index.problems if p.split in (split, None)]
        if problems:
            raise DatasetError(problems)
        samples = splits[split]
    data = cfg.data
    preprocessing = build_preprocessing(cfg)
    decoded = decode_dataset_split(cfg, split, samples, preprocessing)
    if decoded.problems:
        raise DatasetError(decoded.problems)
    dataset = SegmentationDataset(
        samples,
        data.image_size,
        build_normalizer(cfg),
        transform=build_train_transform(cfg) if split == "train" else None,
        images=decoded.images,
        masks=decoded.masks,
        split=split,
        preprocessing=preprocessing,
    )
    if dataset.cached:
        logger.info(
            "cached %s split in RAM%s: %d samples, %.1f MB",
            split,
            " (memory-mapped, shared through the page cache)"
            if isinstance(decoded.images, np.memmap)
            else "",
            len(dataset),
            dataset.cache_nbytes / 2**20,
        )
    return dataset


def decode_dataset_split(
    cfg: ExperimentConfig, split: str, samples: list[Sample], preprocessing: Preprocessing
) -> DecodedSplit:
    """A split's pixels: from the disk cache when ``persistent_cache`` (and ``cache_in_ram``),
    else decoded now (kept only with ``cache_in_ram``)."""
    data = cfg.data
    cache_dir = resolve_cache_dir(data)
    # augment_on: device moves the cached training split to the accelerator: always cache it.
    keep = cfg.train.cache_in_ram or (split == "train" and cfg.train.augment_on == "device")
    if keep and cache_dir is not None:
        return load_or_build_split(
            samples,
            preprocessing,
            cache_dir,
            split=split,
            dataset=data.dataset,
        )
    return decode_split(samples, preprocessing, keep=keep, split=split)


def check_splits_cover_ranks(datasets: dict[str, Any], world_size: int) -> None:
    """Refuse a split with fewer images than training processes, before the Trainer starts.

    Under DDP a rank without a validation or test batch would skip its scoring but never join
    the other ranks' metric gather, and wait for them for ever.

    Raises:
        DatasetError: Naming the split, its size and the number of processes.
    """
    for name, dataset in datasets.items():
        if dataset is not None and len(dataset) < world_size:
            raise DatasetError(
                f"the {name} split has {len(dataset)} image(s) but the run has {world_size} "
                "training processes (TRAIN_CONFIG.devices x num_nodes): every process needs at "
                f"least one {name} image. Add images to the split (DATA_CONFIG.val_fraction, "
                "test_fraction or a split file), or train on fewer devices"
            )


def build_dataloaders(
    cfg: ExperimentConfig, settings: TrainSettings | None = None, world_size: int | None = None
) -> DataLoaders:
    """Checked datasets and loaders of the train/val/test splits of ``cfg``.

    Resolves the data root (generating the synthetic set if needed), pairs the files, carves
    missing splits, decodes every pair once (into the RAM cache when ``cache_in_ram``) and
    refuses the dataset before any epoch if anything is wrong.

    Args:
        cfg: The experiment config.
        settings: What ``TRAIN_CONFIG`` resolved to on this machine (workers, pinned memory,
            world size), as the run resolved it once (``None``: resolved here).
        world_size: Training processes in total (``None``: ``settings``'); used to check
            there is a batch for every rank. Validation and test loaders carry an
            :class:`EvalDistributedSampler`, so under DDP each image is scored exactly once.

    Raises:
        DatasetError: listing every problem found (all splits together).
    """
    index, splits = index_dataset(cfg)
    problems = list(index.problems) + split_problems(index, splits)
    if problems:
        # Report the unreadable files too, so one run shows everything `skinet data verify` does.
        problems += decode_problems(splits)
        raise DatasetError(problems, header=f"dataset {index.root} has {len(problems)} problem(s)")
    datasets: dict[str, SegmentationDataset | None] = {}
    all_problems: list[Problem] = []
    for name in ("train", "val", "test"):
        if name == "test" and not splits.get("test"):
            datasets[name] = None
            continue
        try:
            datasets[name] = build_dataset(cfg, name, splits[name])
        except DatasetError as exc:
            all_problems += exc.problems
    if all_problems:
        raise DatasetError(
            all_problems, header=f"dataset {index.root} has {len(all_problems)} problem(s)"
        )
    train_ds, val_ds, test_ds = datasets["train"], datasets["val"], datasets["test"]
    assert train_ds is not None and val_ds is not None  # non-empty: checked above
    total = sum(d.cache_nbytes for d in datasets.values() if d is not None)
    if total:
        logger.info("RAM cache holds %.1f MB in total", total / 2**20)

    train_cfg = cfg.train
    settings = settings or resolve_train_settings(train_cfg)
    world_size = settings.world_size if world_size is None else world_size
    batch_size = train_cfg.batch_size
    check_splits_cover_ranks(datasets, world_size)
    if len(train_ds) < batch_size * world_size:
        logger.warning(
            "training split has %d samples, fewer than batch_size %d x world_size %d",
            len(train_ds),
            batch_size,
            world_size,
        )
    common: dict[str, Any] = {
        "batch_size": batch_size,
        "num_workers": settings.num_workers,
        "pin_memory": settings.pin_memory,
        "prefetch_factor": train_cfg.prefetch_factor,
    }
    # Dropping a ragged last batch keeps batch-norm away from a batch of one sample.
    drop_last = len(train_ds) >= batch_size * world_size
    if train_cfg.augment_on == "device":
        from skinet.training.data.device_split import build_device_train_loader

        train = build_device_train_loader(cfg, train_ds, drop_last)
    else:
        train = RepeatDataLoader(
            train_ds, sampler=EpochShuffleSampler(train_ds), drop_last=drop_last, **common
        )
    val = RepeatDataLoader(val_ds, sampler=EvalDistributedSampler(val_ds), **common)
    test = (
        RepeatDataLoader(test_ds, sampler=EvalDistributedSampler(test_ds), **common)
        if test_ds is not None
        else None
    )
    return DataLoaders(train, val, test, train_ds, val_ds, test_ds)
