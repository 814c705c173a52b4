"""Fixtures of the model tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch


@pytest.fixture(autouse=True)
def one_intra_op_thread() -> Iterator[None]:
    """Run the tiny models on one thread; restore the previous count afterwards.

    On busy shared cores two intra-op threads per tiny op cost far more in synchronisation than
    they gain (the 60 variants of the determinism test: 6 s on one thread, 110 s on two).
    """
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)
