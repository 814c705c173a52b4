"""``build_dataloaders``: config -> checked datasets -> ``RepeatDataLoader`` per split.

Roots and pairing live in :mod:`skinet.data.roots`, checks in :mod:`skinet.data.verify`, the
disk cache in :mod:`skinet.data.cache`; this module only builds datasets and loaders.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch.utils.data import (
    DataLoader,
    Dataset,
    DistributedSampler,
    RandomSampler,
    Sampler,
    get_worker_info,
)

from skinet.config import ExperimentConfig
from skinet.data.cache import load_or_build_split, resolve_cache_dir
from skinet.data.dataset import DecodedSplit, SegmentationDataset, decode_split
from skinet.data.errors import DatasetError, Problem
from skinet.data.layouts import Sample
from skinet.data.preprocess import Preprocessing, build_preprocessing

# index_dataset, resolve_root and verify_dataset stay importable from here, as before the split.
from skinet.data.roots import index_dataset as index_dataset
from skinet.data.roots import resolve_root as resolve_root
from skinet.data.transforms import build_normalizer, build_train_transform
from skinet.data.verify import decode_problems, split_problems
from skinet.data.verify import verify_dataset as verify_dataset

logger = logging.getLogger(__name__)


def seed_worker(worker_id: int) -> None:
    """Give each DataLoader worker its own albumentations stream.

    ``A.Compose(seed=...)`` ignores the global RNGs, so without this every worker would repeat
    the same augmentations. The worker's ``torch.initial_seed()`` is ``base_seed + worker_id``,
    where PyTorch draws ``base_seed`` from the main process's generator each time workers start:
    it differs per worker, per epoch when workers are not persistent, and per run seed, and is
    reproducible under ``L.seed_everything(..., workers=True)``. It is mixed with the pipeline's
    own seed and the distributed rank (so DDP ranks do not share a stream).
    """
    info = get_worker_info()
    if info is None:
        return
    transform = getattr(info.dataset, "transform", None)
    if transform is None or not hasattr(transform, "set_random_seed"):
        return
    compose_seed = getattr(transform, "seed", None) or 0
    rank = int(os.environ.get("RANK", os.environ.get("LOCAL_RANK", "0")) or 0)
    entropy = [int(compose_seed) % 2**63, torch.initial_seed() % 2**63, rank]
    transform.set_random_seed(int(np.random.SeedSequence(entropy).generate_state(1)[0]))


class EpochShuffleSampler(RandomSampler):
    """A shuffling sampler whose order depends only on the dataset's ``(epoch, seed)``.

    ``RandomSampler`` draws each epoch's order from the global torch RNG, whose draws also
    depend on when DataLoader iterators are created (a persistent-worker iterator draws its
    base seed once, at its first epoch), so a resumed run would shuffle differently from the
    uninterrupted one. Before ``SegmentationDataset.set_augmentation_epoch`` is first called
    this behaves exactly like ``RandomSampler``. A ``RandomSampler`` subclass, so Lightning
    still shuffles when it swaps in its ``DistributedSampler`` under DDP.
    """

    def __init__(self, data_source: SegmentationDataset) -> None:
        super().__init__(data_source)
        self.dataset = data_source

    def __iter__(self) -> Any:
        key = self.dataset.augmentation_key
        if key is None:
            yield from super().__iter__()
            return
        seed = int(np.random.SeedSequence([key[1] % 2**63, key[0]]).generate_state(1)[0])
        generator = torch.Generator().manual_seed(seed)
        yield from torch.randperm(len(self.dataset), generator=generator).tolist()


class RepeatDataLoader(DataLoader):
    """A ``DataLoader`` whose workers persist across epochs.

    Persistent workers keep the forked dataset (and its RAM cache) alive instead of re-forking
    every epoch. ``prefetch_factor`` and ``persistent_workers`` are dropped when
    ``num_workers == 0`` (PyTorch rejects them there). ``worker_init_fn`` defaults to
    :func:`seed_worker`.

    The ``__init__`` signature mirrors ``DataLoader``'s, so Lightning can re-create the loader
    with a ``DistributedSampler`` under DDP (it re-instantiates loader subclasses from their
    ``__init__`` arguments).
    """

    def __init__(
        self,
        dataset: Dataset,
        batch_size: int | None = 1,
        shuffle: bool | None = None,
        sampler: Sampler | Iterable | None = None,
        batch_sampler: Sampler | Iterable | None = None,
        num_workers: int = 0,
        collate_fn: Callable[[list], Any] | None = None,
        pin_memory: bool = False,
        drop_last: bool = False,
        timeout: float = 0,
        worker_init_fn: Callable[[int], None] | None = seed_worker,
        multiprocessing_context: Any = None,
        generator: torch.Generator | None = None,
        *,
        prefetch_factor: int | None = None,
        persistent_workers: bool = True,
        pin_memory_device: str = "",
        in_order: bool = True,
    ) -> None:
        if num_workers == 0:
            prefetch_factor = None
            persistent_workers = False
        super().__init__(
            dataset,
            batch_size=batch_size,
            shuffle=shuffle,
            sampler=sampler,
            batch_sampler=batch_sampler,
            num_workers=num_workers,
            collate_fn=collate_fn,
            pin_memory=pin_memory,
            drop_last=drop_last,
            timeout=timeout,
            worker_init_fn=worker_init_fn,
            multiprocessing_context=multiprocessing_context,
            generator=generator,
            prefetch_factor=prefetch_factor,
            persistent_workers=persistent_workers,
            pin_memory_device=pin_memory_device,
            in_order=in_order,
        )


class EvalDistributedSampler(DistributedSampler):
    """Every sample exactly once over all ranks: rank ``r`` of ``W`` takes ``r, r + W, ...``.

    Lightning's own sampler pads each rank to the same length by repeating samples, so under DDP
    a validation or test split whose size is not a multiple of the world size would count some
    images twice in the epoch metrics. Lightning has an unpadded sampler only for prediction,
    and it needs the process group when built; this one reads the group when iterated, because
    the loaders are built before the ``Trainer`` starts it. Outside a process group it yields the
    whole split in order. Being a ``DistributedSampler``, Lightning leaves it in place.

    Ranks may then get different numbers of batches, which is safe as long as nothing in a
    validation or test step synchronises across ranks (SkiNet's metrics sync at epoch end).
    """

    def __init__(self, dataset: SegmentationDataset) -> None:
        super().__init__(dataset, num_replicas=1, rank=0, shuffle=False)
        self.size = len(dataset)

    def _indices(self) -> range:
        if dist.is_available() and dist.is_initialized():
            self.num_replicas, self.rank = dist.get_world_size(), dist.get_rank()
        else:
            self.num_replicas, self.rank = 1, 0
        return range(self.rank, self.size, self.num_replicas)

    def __iter__(self) -> Iterator[int]:
        return iter(self._indices())

    def __len__(self) -> int:
        return len(self._indices())


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


def build_dataloaders(cfg: ExperimentConfig, world_size: int | None = None) -> DataLoaders:
    """Checked datasets and loaders of the train/val/test splits of ``cfg``.

    Resolves the data root (generating the synthetic set if needed), pairs the files, carves
    missing splits, decodes every pair once (into the RAM cache when ``cache_in_ram``) and
    refuses the dataset before any epoch if anything is wrong.

    Args:
        cfg: The experiment config.
        world_size: Training processes in total (``None``: ``TRAIN_CONFIG.world_size``); used
            to check there is a batch for every rank. Validation and test loaders carry an
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
    world_size = train_cfg.world_size if world_size is None else world_size
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
        "num_workers": train_cfg.num_workers or 0,
        "pin_memory": bool(train_cfg.pin_memory),
        "prefetch_factor": train_cfg.prefetch_factor,
    }
    # Dropping a ragged last batch keeps batch-norm away from a batch of one sample.
    drop_last = len(train_ds) >= batch_size * world_size
    if train_cfg.augment_on == "device":
        from skinet.data.device_split import build_device_train_loader

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
