"""Every epoch's records, kept once for the run's report and its plots.

``trainer.callback_metrics`` after ``fit`` holds the last epoch's values; the best checkpoint
is often an earlier epoch. :class:`EpochMetricsHistory` records, per epoch, the validation
metrics (``val_*``) when its validation ends, the training metrics (``train_*``) when its
training ends, the learning rate it started with and the validation threshold sweep; it saves
them in every checkpoint (which is written after it, at the same hook), so a resumed run still
knows the epochs trained before the resume. After fit it reads the best checkpoint once
(:class:`BestCheckpoint`): its epoch for the run's metrics, its weights for the plots.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.pytorch.callbacks import Callback
from torch import nn

from skinet.metrics.thresholds import ThresholdResult
from skinet.training.callbacks.mlflow_artifacts import best_checkpoint

log = logging.getLogger(__name__)

REPORTED_WITH_TRAIN = ("lr-", "perf/")
"""Prefixes of the step figures kept with each epoch's ``train_*`` (``LearningRateMonitor``'s
``lr-<optimizer>``, :class:`~skinet.training.callbacks.throughput.ThroughputCallback`'s)."""

LEGACY_PLOTS = "TrainingPlotsCallback"
"""Where checkpoints of earlier SkiNet versions kept the per-epoch records the plots draw."""


@dataclass(frozen=True)
class BestCheckpoint:
    """The best checkpoint of the first monitored ``ModelCheckpoint``, read once at fit end."""

    path: Path
    epoch: int
    """0-based epoch it was saved at."""
    state_dict: dict[str, torch.Tensor]
    """Its weights."""

    @contextmanager
    def loaded_into(self, module: nn.Module) -> Iterator[None]:
        """``module`` with these weights inside the block, its own after."""
        current = {k: v.detach().clone() for k, v in module.state_dict().items()}
        module.load_state_dict(self.state_dict)
        try:
            yield
        finally:
            module.load_state_dict(current)


class EpochMetricsHistory(Callback):
    """``history[epoch]``: the ``val_*`` metrics of each validated epoch (0-based);
    ``train[epoch]`` its ``train_*`` metrics (with the learning rate and throughput figures
    logged beside them), ``learning_rates[epoch]`` the first parameter
    group's learning rate at its start, ``sweeps[epoch]`` its validation threshold sweep
    (``pl_module.val_threshold_result``) and ``thresholds[epoch]`` the threshold it chose
    (``pl_module.threshold_used`` after it)."""

    def __init__(self) -> None:
        self.history: dict[int, dict[str, float]] = {}
        self.train: dict[int, dict[str, float]] = {}
        self.learning_rates: dict[int, float] = {}
        self.sweeps: dict[int, ThresholdResult] = {}
        self.thresholds: dict[int, float] = {}
        self._best: BestCheckpoint | None = None
        self._best_read = False
        self._legacy: dict[str, Any] | None = None

    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._best, self._best_read = None, False

    def best_checkpoint(self, trainer: L.Trainer) -> BestCheckpoint | None:
        """The fit's best checkpoint (:func:`read_best_checkpoint`), read at the first call."""
        if not self._best_read:
            self._best, self._best_read = read_best_checkpoint(trainer), True
        return self._best

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.optimizers:
            lr = trainer.optimizers[0].param_groups[0]["lr"]
            self.learning_rates[trainer.current_epoch] = float(lr)

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.sanity_checking:
            return
        epoch = trainer.current_epoch
        self.history[epoch] = _metrics(trainer, "val_")
        sweep = getattr(pl_module, "val_threshold_result", None)
        if isinstance(sweep, ThresholdResult):
            self.sweeps[epoch] = sweep
        threshold = getattr(pl_module, "threshold_used", None)
        if threshold is not None:
            self.thresholds[epoch] = float(threshold)

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        # Epoch-level train metrics are in callback_metrics here (they are reduced on access).
        # With the step figures a run reports beside them (learning rate, throughput), so a
        # resume that trains no epoch still reports the last epoch's.
        figures = _metrics(trainer, "train_", per_step=True)
        for prefix in REPORTED_WITH_TRAIN:
            figures.update(_metrics(trainer, prefix))
        self.train[trainer.current_epoch] = figures

    def curves(self) -> dict[str, dict[int, float]]:
        """``{metric: {epoch: value}}`` of every recorded ``train_*`` and ``val_*`` metric."""
        out: dict[str, dict[int, float]] = {}
        for records in (self.train, self.history):
            for epoch, metrics in records.items():
                for name, value in metrics.items():
                    out.setdefault(name, {})[epoch] = value
        return out

    def state_dict(self) -> dict[str, Any]:
        return {
            "history": {str(epoch): dict(m) for epoch, m in self.history.items()},
            "train": {str(epoch): dict(m) for epoch, m in self.train.items()},
            "learning_rates": {str(epoch): lr for epoch, lr in self.learning_rates.items()},
            "thresholds": {str(epoch): t for epoch, t in self.thresholds.items()},
            "sweeps": {
                str(epoch): {name: value.detach().cpu() for name, value in vars(sweep).items()}
                for epoch, sweep in self.sweeps.items()
            },
        }

    def on_load_checkpoint(
        self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict[str, Any]
    ) -> None:
        # A checkpoint of an earlier SkiNet kept the train metrics, learning rates and sweeps
        # in the plots callback's state; a resumed run still draws those epochs.
        states = checkpoint.get("callbacks", {})
        self._legacy = next((v for k, v in states.items() if k.startswith(LEGACY_PLOTS)), None)
        self._take_legacy()

    def _take_legacy(self) -> None:
        legacy = self._legacy
        if not legacy:
            return
        for name, values in legacy.get("history", {}).items():
            if name.startswith("train_"):
                for epoch, value in values.items():
                    self.train.setdefault(int(epoch), {}).setdefault(name, float(value))
        for epoch, lr in legacy.get("learning_rates", {}).items():
            self.learning_rates.setdefault(int(epoch), float(lr))
        for epoch, threshold in legacy.get("thresholds_used", {}).items():
            self.thresholds.setdefault(int(epoch), float(threshold))
        for epoch, fields in legacy.get("threshold_results", {}).items():
            self.sweeps.setdefault(int(epoch), ThresholdResult(**fields))

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        def by_epoch(key: str) -> dict[int, Any]:
            return {int(epoch): value for epoch, value in state_dict.get(key, {}).items()}

        self.history = {epoch: dict(m) for epoch, m in by_epoch("history").items()}
        self.train = {epoch: dict(m) for epoch, m in by_epoch("train").items()}
        self.learning_rates = {epoch: float(lr) for epoch, lr in by_epoch("learning_rates").items()}
        self.sweeps = {epoch: ThresholdResult(**f) for epoch, f in by_epoch("sweeps").items()}
        self.thresholds = {epoch: float(t) for epoch, t in by_epoch("thresholds").items()}
        self._take_legacy()


def _metrics(trainer: L.Trainer, prefix: str, per_step: bool = False) -> dict[str, float]:
    """The ``prefix*`` metrics; ``per_step``: those also logged per step keep only their epoch
    value (``*_epoch``), under their plain name."""
    out: dict[str, float] = {}
    for name, value in trainer.callback_metrics.items():
        if not name.startswith(prefix) or (per_step and name.endswith("_step")):
            continue
        out[name.removesuffix("_epoch") if per_step else name] = float(value)
    return out


def read_best_checkpoint(trainer: L.Trainer) -> BestCheckpoint | None:
    """The best checkpoint's epoch and weights; ``None`` without a monitored checkpoint or when
    it cannot be read (a warning: the run then reports its last epoch)."""
    path = best_checkpoint(trainer)
    if path is None:
        return None
    try:
        checkpoint = torch.load(path, map_location="cpu", weights_only=True)
        return BestCheckpoint(path, int(checkpoint["epoch"]), checkpoint["state_dict"])
    except Exception as exc:  # noqa: BLE001 - the run's report falls back to its last epoch
        log.warning("could not read the best checkpoint %s: %s", path, exc)
        return None
