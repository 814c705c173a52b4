"""``EvalDistributedSampler``: each validation/test image exactly once over all ranks.

The real multi-process check is ``tests/training/test_run.py`` (2 gloo ranks, odd splits); here
the rank a process would have is simulated to cover world sizes that do not divide the split.
"""

from __future__ import annotations

import pytest
import torch.distributed as dist
from torch.utils.data import DistributedSampler

from skinet.config.experiment import parse_config
from skinet.training.data.loaders import build_dataloaders
from skinet.training.data.samplers import EvalDistributedSampler


def _as_rank(monkeypatch: pytest.MonkeyPatch, rank: int, world: int) -> None:
    monkeypatch.setattr(dist, "is_initialized", lambda: True)
    monkeypatch.setattr(dist, "get_world_size", lambda *a, **k: world)
    monkeypatch.setattr(dist, "get_rank", lambda *a, **k: rank)


@pytest.mark.parametrize(("size", "world"), [(5, 2), (7, 3), (2, 4), (8, 4)])
def test_ranks_cover_the_split_once(monkeypatch: pytest.MonkeyPatch, size: int, world: int) -> None:
    sampler = EvalDistributedSampler(list(range(size)))  # type: ignore[arg-type]
    seen: list[int] = []
    for rank in range(world):
        _as_rank(monkeypatch, rank, world)
        indices = list(sampler)
        assert len(sampler) == len(indices)
        seen += indices
    assert sorted(seen) == list(range(size))


def test_without_a_process_group_it_is_the_whole_split_in_order() -> None:
    sampler = EvalDistributedSampler(list(range(5)))  # type: ignore[arg-type]
    assert list(sampler) == [0, 1, 2, 3, 4] and len(sampler) == 5


def test_val_and_test_loaders_carry_it(tiny_raw: dict) -> None:
    loaders = build_dataloaders(parse_config(tiny_raw))
    for loader in (loaders.val, loaders.test):
        assert loader is not None
        # A DistributedSampler already: Lightning does not replace it with its padding one.
        assert isinstance(loader.sampler, EvalDistributedSampler)
        assert isinstance(loader.sampler, DistributedSampler)
        assert len(list(loader.sampler)) == len(loader.dataset)  # type: ignore[arg-type]
