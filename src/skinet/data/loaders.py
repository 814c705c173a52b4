"""``build_dataloaders``: config -> checked datasets -> ``RepeatDataLoader`` per split."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
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

from skinet.config import DataConfig, ExperimentConfig
from skinet.data.dataset import SegmentationDataset, decode_split
from skinet.data.errors import DatasetError, Problem
from skinet.data.layouts import (
    DEFAULT_DATA_DIRS,
    DatasetIndex,
    Sample,
    assign_splits,
    candidate_roots,
    read_layout,
    resolve_data_root,
)
from skinet.data.preprocess import build_preprocessing
from skinet.data.synthetic import is_complete, make_synthetic_dataset
from skinet.data.transforms import build_normalizer, build_train_transform

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


def _data_cfg(cfg: ExperimentConfig | DataConfig) -> DataConfig:
    return cfg.data if isinstance(cfg, ExperimentConfig) else cfg


def resolve_root(cfg: ExperimentConfig | DataConfig, *, generate: bool = True) -> Path:
    """The dataset folder of ``DATA_CONFIG``, generating the synthetic set when it is absent.

    ``data_dir`` absolute is used as is; relative, it is looked for under
    ``azure_blob_mount_point``, then ``local_data_root``, then the current directory.
    """
    data = _data_cfg(cfg)
    data_dir = data.data_dir or DEFAULT_DATA_DIRS[data.dataset]
    if data.dataset == "synthetic":
        candidates = candidate_roots(data_dir, data.azure_blob_mount_point, data.local_data_root)
        root = next((c for c in candidates if is_complete(c)), None)
        if root is None:
            # Generate where a user would look first among the writable places: the local root
            # (or the path itself when absolute), else the current directory.
            root = (
                candidates[1]
                if data.azure_blob_mount_point and len(candidates) > 1
                else candidates[0]
            )
            if not generate:
                raise DatasetError(f"synthetic dataset not generated yet at {root}")
            logger.info("generating synthetic dataset in %s", root)
            make_synthetic_dataset(
                root,
                num_train=data.synthetic_num_train,
                num_val=data.synthetic_num_val,
                num_test=data.synthetic_num_test,
                image_size=data.synthetic_image_size,
                seed=data.split_random_seed,
            )
        return root
    return resolve_data_root(data_dir, data.azure_blob_mount_point, data.local_data_root)


def index_dataset(
    cfg: ExperimentConfig | DataConfig,
) -> tuple[DatasetIndex, dict[str, list[Sample]]]:
    """The layout's pairs and their train/val/test assignment (truncated by ``max_samples``)."""
    data = _data_cfg(cfg)
    index = read_layout(resolve_root(data), data.dataset, data.mask_suffix)
    if data.split_file is not None:
        from skinet.data.splits import apply_split_file

        splits = apply_split_file(index, data.split_file)
    else:
        splits = assign_splits(index, data.split_random_seed, data.val_fraction, data.test_fraction)
    if data.max_samples_per_split is not None:
        splits = {name: pairs[: data.max_samples_per_split] for name, pairs in splits.items()}
    return index, splits


def verify_dataset(
    cfg: ExperimentConfig | DataConfig | str | Path,
    dataset: str | None = None,
    *,
    mask_suffix: str = "_segmentation",
    decode: bool = True,
) -> list[Problem]:
    """Every problem of a dataset: pairing, splits, and (``decode``) each file's content.

    Args:
        cfg: A config, or a dataset folder together with ``dataset`` (the layout name).
        dataset: Layout name when ``cfg`` is a folder.
        mask_suffix: Mask suffix of the ``folder`` layout when ``cfg`` is a folder.
        decode: Also decode every image and mask (slower, catches corrupt files).
    """
    if isinstance(cfg, (str, Path)):
        if dataset is None:
            raise ValueError("verify_dataset(root) needs dataset= (the layout name)")
        data = DataConfig(
            dataset=dataset, data_dir=str(Path(cfg).resolve()), mask_suffix=mask_suffix
        )  # type: ignore[arg-type]
    else:
        data = _data_cfg(cfg)
    try:
        index, splits = index_dataset(data)
    except DatasetError as exc:
        return exc.problems or [Problem(Path(data.data_dir or "."), str(exc))]
    problems = list(index.problems) + _split_problems(index, splits)
    if decode:
        problems += _decode_problems(splits)
    return problems


def _decode_problems(splits: dict[str, list[Sample]]) -> list[Problem]:
    """Every unreadable file of the paired samples (decoded for the check only, not kept)."""
    problems: list[Problem] = []
    for name, pairs in splits.items():
        problems += decode_split(pairs, 8, keep=False, split=name).problems
    return problems


def _split_problems(index: DatasetIndex, splits: dict[str, list[Sample]]) -> list[Problem]:
    problems = []
    for name in ("train", "val"):
        if not splits.get(name):
            problems.append(Problem(index.root, f"{name} split is empty"))
    return problems


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
    # augment_on: device moves the cached training split to the accelerator: always cache it.
    keep = cfg.train.cache_in_ram or (split == "train" and cfg.train.augment_on == "device")
    decoded = decode_split(samples, preprocessing, keep=keep, split=split)
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
            "cached %s split in RAM: %d samples, %.1f MB",
            split,
            len(dataset),
            dataset.cache_nbytes / 2**20,
        )
    return dataset


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
    problems = list(index.problems) + _split_problems(index, splits)
    if problems:
        # Report the unreadable files too, so one run shows everything `skinet data verify` does.
        problems += _decode_problems(splits)
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
