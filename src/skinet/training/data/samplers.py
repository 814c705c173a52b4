"""Samplers and the DataLoader every split uses: seeded workers, epoch-keyed shuffling, and
evaluation that sees every image exactly once over all DDP ranks."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any

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

from skinet.runtime.rank import launch_rank
from skinet.runtime.seeds import derive_seed
from skinet.training.signals import stop_worker_quietly

if TYPE_CHECKING:
    from skinet.training.data.dataset import SegmentationDataset


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
    transform.set_random_seed(derive_seed(int(compose_seed), torch.initial_seed(), *launch_rank()))


def init_worker(worker_id: int) -> None:
    """Each DataLoader worker's start: its own augmentation stream (:func:`seed_worker`), and
    a quiet exit on Ctrl-C or ``kill`` of the process group (:func:`stop_worker_quietly`)."""
    stop_worker_quietly()
    seed_worker(worker_id)


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
        seed = derive_seed(key[1], key[0])
        generator = torch.Generator().manual_seed(seed)
        yield from torch.randperm(len(self.dataset), generator=generator).tolist()


class RepeatDataLoader(DataLoader):
    """A ``DataLoader`` whose workers persist across epochs.

    Persistent workers keep the forked dataset (and its RAM cache) alive instead of re-forking
    every epoch. ``prefetch_factor`` and ``persistent_workers`` are dropped when
    ``num_workers == 0`` (PyTorch rejects them there). ``worker_init_fn`` defaults to
    :func:`init_worker`.

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
        worker_init_fn: Callable[[int], None] | None = init_worker,
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
