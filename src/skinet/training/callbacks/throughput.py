"""Per-step training throughput: the first signal of a DataLoader bottleneck."""

from __future__ import annotations

from time import perf_counter  # module-level reference: tests patch the clock here
from typing import Any

import lightning as L
import torch
from lightning.pytorch.callbacks import Callback

from skinet.keys import MetricsKey


class ThroughputCallback(Callback):
    """Log ``perf/samples_per_sec`` and ``perf/time_per_step_ms`` after every training batch.

    Lightning's ``ThroughputMonitor`` averages over a sliding window and needs a
    ``batch_size_fn``; this callback reports each step on its own, under the guide's names.
    A step is timed from the end of the previous batch, so the wait for the DataLoader is part
    of it (the first batch of an epoch and the first after validation are timed from their
    ``on_train_batch_start``, leaving out worker start-up and validation). Values are logged
    with ``pl_module.log``, so they reach every logger at ``log_every_n_steps``.
    """

    def __init__(self) -> None:
        self._last: float | None = None

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._last = None

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._last = None

    def on_train_batch_start(
        self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        if self._last is None:
            self._last = perf_counter()

    def on_train_batch_end(
        self,
        trainer: L.Trainer,
        pl_module: L.LightningModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
    ) -> None:
        now = perf_counter()
        start, self._last = self._last, now
        batch_size = batch_size_of(batch)
        if start is None or now <= start or batch_size == 0:
            return
        step_s = now - start
        metrics = {
            MetricsKey.SAMPLES_PER_SEC.value: batch_size / step_s,
            MetricsKey.TIME_PER_STEP_MS.value: step_s * 1000.0,
        }
        for name, value in metrics.items():
            pl_module.log(name, value, on_step=True, on_epoch=False, batch_size=batch_size)


def batch_size_of(batch: Any) -> int:
    """Samples in a batch ``(images, masks, ...)``, a dict with ``image(s)``, or a tensor."""
    if isinstance(batch, dict):
        batch = batch.get("images", batch.get("image"))
    elif isinstance(batch, list | tuple) and batch:
        batch = batch[0]
    return int(batch.shape[0]) if isinstance(batch, torch.Tensor) and batch.ndim > 0 else 0
