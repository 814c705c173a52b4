"""A learning-rate schedule that knows its budget: a cosine over the run, however it ends.

An epoch-based cosine needs to know how many epochs a run will train; under a wall-clock budget
that depends on the machine. :class:`BudgetCosineLR` anneals by the share of the run done
instead (:func:`run_progress`): of ``TRAIN_CONFIG.max_time``, read from Lightning's ``Timer``
(the callback that enforces it), or of ``max_epochs`` when that share is further along. The
learning rate reaches its minimum when the run ends, on any machine, whichever limit ends it.
The Timer keeps the time already trained across a resume, and the trainer its epoch, so the
schedule does too. Progressive resizing reads the same share (:func:`run_share`).
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
        progress: The share of the run done (:func:`run_progress`), in [0, 1] (values outside
            are clipped).
        eta_min: The learning rate at the end of the run.
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


def run_share(trainer: L.Trainer, epochs: float) -> float:
    """The share of the run done after ``epochs`` epochs (fractions count): of ``max_epochs``,
    or of ``max_time`` (from the trainer's ``Timer``) when it is set and further along. It
    reaches 1 when the first of them ends the run."""
    done = epochs / trainer.max_epochs if trainer.max_epochs and trainer.max_epochs > 0 else 0.0
    timer = budget_timer(trainer)
    if timer is not None:
        elapsed, remaining = timer.time_elapsed(), timer.time_remaining() or 0.0
        total = elapsed + remaining
        done = max(done, elapsed / total if total > 0 else 1.0)
    return done


def run_progress(trainer: L.Trainer) -> Callable[[], float]:
    """:func:`run_share` while the run trains, read after each optimizer step: the epochs
    trained so far count the current one's share of batches done.

    Counted in epochs, not steps, so that a resume on more devices (fewer steps per epoch)
    keeps its place.
    """

    def progress() -> float:
        total = trainer.num_training_batches  # infinite until the loaders are set up
        # read after a step: the batches begun this epoch are the batches done
        batches = trainer.fit_loop.epoch_loop.batch_progress.current.ready
        within = batches / total if 0 < total < math.inf else 0.0
        return run_share(trainer, trainer.current_epoch + within)

    return progress
