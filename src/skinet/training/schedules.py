"""A learning-rate schedule that knows its time budget: a cosine over ``TRAIN_CONFIG.max_time``.

An epoch-based cosine needs to know how many epochs a run will train; under a wall-clock budget
that depends on the machine. :class:`BudgetCosineLR` anneals by the share of the budget spent
instead, read from Lightning's ``Timer`` (the callback that enforces ``max_time``), so the
learning rate reaches its minimum when the budget ends, on any machine. The Timer keeps the time
already trained across a resume, and so does the schedule.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import lightning as L
import torch
from lightning.pytorch.callbacks import Timer
from torch.optim.lr_scheduler import LRScheduler


class BudgetCosineLR(LRScheduler):
    """Cosine from each group's initial lr to ``eta_min`` as ``progress()`` goes from 0 to 1.

    Step it after every optimizer step (Lightning's ``interval: "step"``). ``progress`` is not
    part of the state: a resumed schedule reads the restored Timer.

    Args:
        optimizer: The optimizer whose groups it sets.
        progress: The share of the budget spent, in [0, 1] (values outside are clipped).
        eta_min: The learning rate at the end of the budget.
    """

    def __init__(
        self, optimizer: torch.optim.Optimizer, progress: Callable[[], float], eta_min: float = 0.0
    ) -> None:
        self.progress = progress
        self.eta_min = eta_min
        super().__init__(optimizer)

    def get_lr(self) -> list[float]:  # type: ignore[override]
        done = min(max(self.progress(), 0.0), 1.0)
        factor = (1.0 + math.cos(math.pi * done)) / 2.0
        return [float(self.eta_min + (base - self.eta_min) * factor) for base in self.base_lrs]

    def state_dict(self) -> dict[str, Any]:
        return {key: value for key, value in super().state_dict().items() if key != "progress"}


def budget_timer(trainer: L.Trainer) -> Timer | None:
    """The ``Timer`` that enforces ``TRAIN_CONFIG.max_time``; ``None`` without a time budget."""
    timer = next((c for c in trainer.callbacks if isinstance(c, Timer)), None)  # type: ignore[attr-defined]
    return timer if timer is not None and timer.time_remaining() is not None else None


def budget_spent(trainer: L.Trainer) -> bool:
    """Whether the run's ``max_time`` has run out."""
    timer = budget_timer(trainer)
    return timer is not None and (timer.time_remaining() or 0.0) <= 0


def budget_progress(trainer: L.Trainer) -> Callable[[], float]:
    """The share of ``max_time`` trained so far, from the trainer's ``Timer``.

    Raises:
        ValueError: The trainer has no time budget (``max_time`` unset).
    """
    timer = budget_timer(trainer)
    if timer is None:
        raise ValueError(
            "scheduler_type: cosine_budget needs a time budget: set TRAIN_CONFIG.max_time"
        )

    def progress() -> float:
        elapsed, remaining = timer.time_elapsed(), timer.time_remaining() or 0.0
        total = elapsed + remaining
        return elapsed / total if total > 0 else 1.0

    return progress
