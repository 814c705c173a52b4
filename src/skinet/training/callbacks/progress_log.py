"""Training progress as log lines, for runs that no one watches on a terminal.

The progress bar draws only on a terminal or in Jupyter (:func:`progress_bar_draws`): under
``> train.log``, ``nohup``, SLURM or CI a run shows no bar, and without these lines would print
its model summary and then nothing until the end. :class:`ProgressLogCallback`
logs one line per epoch (steps, train loss, the validation metrics, images/s and the time left
under ``TRAIN_CONFIG.max_time``) and, while an epoch trains, a line at least every
``TRAIN_CONFIG.progress_log_interval_sec``. It stays quiet when the progress bar draws.

An epoch cut short (``max_time`` ran out, or a stop was asked for) says so, with the steps it
ran and its images/s over them (Lightning still validates it).

Where it draws, :class:`EpochProgressBar` is Lightning's rich progress bar with the epochs
counted the way these lines count them: ``Epoch 9/30`` is the ninth of 30, where Lightning's
own bar says ``Epoch 8/29``.
"""

from __future__ import annotations

import logging
import time
from datetime import timedelta
from typing import Any

import lightning as L
from lightning.pytorch.callbacks import Callback, RichProgressBar

from skinet.keys import MetricsKey
from skinet.runtime.console import draws
from skinet.training.callbacks.throughput import batch_size_of
from skinet.training.schedules import budget_spent, budget_timer

log = logging.getLogger("skinet.progress")

EPOCH_METRICS = (
    "train_loss",
    "val_loss",
    "val_dice",
    "val_iou",
    MetricsKey.VAL_BEST_DICE_AT_THRESHOLD.value,
)
"""The metrics of an epoch's line, in this order, when the epoch logged them."""


def _clock(seconds: float) -> str:
    return str(timedelta(seconds=round(max(seconds, 0.0))))


def progress_bar_draws(enabled: bool) -> bool:
    """Whether a training run shows its progress bar: ``enable_progress_bar`` is on and rich
    draws here (a terminal, Jupyter, or ``FORCE_COLOR`` / ``TTY_COMPATIBLE`` set). Elsewhere,
    in a log file, the bar's last frames would litter the epoch lines, so there is no bar."""
    return enabled and draws()


class ProgressLogCallback(Callback):
    """Log a line per epoch and at least one per ``interval_s`` while training.

    Args:
        interval_s: The longest silence while an epoch trains.
        progress_bar: Whether the progress bar is on; where it draws nothing is logged.
    """

    def __init__(self, interval_s: float = 60.0, progress_bar: bool = True) -> None:
        self.interval_s = interval_s
        self.active = not progress_bar_draws(progress_bar)
        self._last_line = 0.0
        self._epoch_start = 0.0
        self._train_seconds = 0.0
        self._images = 0
        self._steps = 0
        self._fit_start = 0.0

    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._fit_start = self._last_line = time.monotonic()

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._epoch_start = time.monotonic()
        self._train_seconds, self._images, self._steps = 0.0, 0, 0

    def on_train_batch_end(
        self,
        trainer: L.Trainer,
        pl_module: L.LightningModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
    ) -> None:
        self._images += batch_size_of(batch)
        self._steps += 1
        now = time.monotonic()
        if not self.active or not trainer.is_global_zero or now - self._last_line < self.interval_s:
            return
        loss = outputs.get("loss") if isinstance(outputs, dict) else outputs
        loss_text = f", loss {float(loss):.4f}" if loss is not None else ""
        rate = self._images / max(now - self._epoch_start, 1e-9)
        log.info(
            "epoch %d/%d step %d/%s%s, %.1f images/s, %s elapsed%s",
            trainer.current_epoch + 1,
            trainer.max_epochs,
            batch_idx + 1,
            _total(trainer.num_training_batches),
            loss_text,
            rate,
            _clock(now - self._fit_start),
            _left(trainer),
        )
        self._last_line = now

    def on_validation_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.training:
            self._train_seconds = time.monotonic() - self._epoch_start

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if not self.active or not trainer.is_global_zero:
            return
        now = time.monotonic()
        seconds = self._train_seconds or now - self._epoch_start
        planned = trainer.num_training_batches
        if trainer.should_stop and _finite(planned) and self._steps < planned:
            steps = f"stopped after {self._steps} of {int(planned)} steps ({_stop_reason(trainer)})"
        else:
            steps = f"done: {self._steps} steps"
        metrics = trainer.callback_metrics
        figures = ", ".join(
            f"{name} {float(metrics[name]):.4f}" for name in EPOCH_METRICS if name in metrics
        )
        log.info(
            "epoch %d/%d %s, %s, %.1f images/s, %s elapsed%s",
            trainer.current_epoch + 1,
            trainer.max_epochs,
            steps,
            figures or "no metrics yet",
            self._images / max(seconds, 1e-9),
            _clock(now - self._fit_start),
            _left(trainer),
        )
        self._last_line = now


def _finite(value: Any) -> bool:
    return isinstance(value, int) or (isinstance(value, float) and value != float("inf"))


def _total(value: Any) -> str:
    return str(int(value)) if _finite(value) else "?"


def _stop_reason(trainer: L.Trainer) -> str:
    """Why an epoch ended before its last step: the time budget, or a stop asked for."""
    return "max_time reached" if budget_spent(trainer) else "training stopped"


def _left(trainer: L.Trainer) -> str:
    """``, 0:07:48 left of max_time 0:15:00`` under a time budget, else nothing."""
    timer = budget_timer(trainer)
    if timer is None:
        return ""
    remaining = timer.time_remaining() or 0.0
    return f", {_clock(remaining)} left of max_time {_clock(timer.time_elapsed() + remaining)}"


class EpochProgressBar(RichProgressBar):
    """Lightning's rich progress bar, its epochs counted from 1 like SkiNet's log lines."""

    def _get_train_description(self, current_epoch: int) -> str:
        description = f"Epoch {current_epoch + 1}"
        if self.trainer.max_epochs is not None:
            description += f"/{self.trainer.max_epochs}"
        # As wide as the validation bar's description, like Lightning's: the bars do not flicker.
        return f"{description:{len(self.validation_description)}}"
