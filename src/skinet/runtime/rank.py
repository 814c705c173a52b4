"""This process's rank in a distributed launch, read from the launcher's environment.

Read before the ``Trainer`` (and its process group) exists, and in DataLoader workers, which
have no process group. Lightning starts the other ranks of a node with ``LOCAL_RANK`` set and
marks the other nodes of a multi-node job with ``NODE_RANK``; torchrun, SLURM and jsrun set the
global rank (``RANK``, ``SLURM_PROCID``, ``JSM_NAMESPACE_RANK``).
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager

RANK_VARIABLES = ("RANK", "LOCAL_RANK", "SLURM_PROCID", "JSM_NAMESPACE_RANK")
"""Checked in this order; the first one set gives the rank."""

NODE_RANK_VARIABLES = ("NODE_RANK", "GROUP_RANK")


def launch_rank(environ: Mapping[str, str] | None = None) -> tuple[int, int]:
    """``(node rank, rank)`` of this process; ``(0, 0)`` outside a distributed launch.

    The rank is the first of :data:`RANK_VARIABLES` that is set. With ``RANK`` set it is already
    global and the node rank is 0; otherwise it may be a node-local rank and the node rank is
    ``NODE_RANK`` (or ``GROUP_RANK``), so the pair is distinct for every process of a job.
    """
    env = os.environ if environ is None else environ
    rank = next((int(env[v]) for v in RANK_VARIABLES if env.get(v)), 0)
    if env.get("RANK"):
        return 0, rank
    node = next((int(env[v]) for v in NODE_RANK_VARIABLES if env.get(v)), 0)
    return node, rank


def is_launch_rank_zero(environ: Mapping[str, str] | None = None) -> bool:
    """Whether this process is global rank 0 (the one that writes a run's folder)."""
    return launch_rank(environ) == (0, 0)


def release_process_group() -> None:
    """Wait for every rank, then close the open process group (none open: nothing to do)."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()


@contextmanager
def own_process_group() -> Iterator[None]:
    """Close, when the block ends without an error, a process group opened inside it.

    Lightning's DDP opens the group during ``fit`` and closes only NCCL groups when the process
    exits. A gloo group (DDP on CPUs) left open can abort the interpreter at exit ("terminate
    called without an active exception", exit status 134) after a run that succeeded; closed,
    it also lets a later run in the same process open a group of its own. A group that was open
    before the block belongs to the caller and stays open. After an error nothing is closed:
    the barrier could wait for ranks that failed.
    """
    import torch.distributed as dist

    opened_before = dist.is_available() and dist.is_initialized()
    yield
    if not opened_before:
        release_process_group()
