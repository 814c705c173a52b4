"""What a checkpoint needs beyond Lightning's own state so a resumed run continues exactly.

Lightning restores weights, optimizer, scheduler, loops and callback states, but not the random
number generators, and the DataLoader workers' augmentation streams live in worker processes
that a resume starts afresh. ``ResumeStateCallback`` stores the RNG states in the checkpoint
(its ``state_dict``), keys the augmentations to the epoch, and applies the current config's
scheduler and early-stopping settings over the stale ones restored from the checkpoint.
"""

from __future__ import annotations

import logging
import random
from typing import TYPE_CHECKING, Any

import lightning as L
import numpy as np
import torch
from lightning.pytorch.callbacks import Callback, EarlyStopping, LearningRateMonitor
from lightning.pytorch.loggers import MLFlowLogger
from torch.optim.lr_scheduler import CosineAnnealingLR, ReduceLROnPlateau

if TYPE_CHECKING:
    from skinet.config.experiment import ExperimentConfig
    from skinet.training.data.dataset import SegmentationDataset

log = logging.getLogger(__name__)


def collect_rng_states() -> dict[str, Any]:
    """The torch (CPU and, once initialised, CUDA), NumPy and Python RNG states as plain data."""
    kind, keys, pos, has_gauss, gauss = np.random.get_state(legacy=True)
    states: dict[str, Any] = {
        "torch": torch.get_rng_state(),
        # Plain lists and ints: the checkpoint stays loadable with torch.load(weights_only=True).
        "numpy": [kind, np.asarray(keys).tolist(), int(pos), int(has_gauss), float(gauss)],
        "python": random.getstate(),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        states["cuda"] = torch.cuda.get_rng_state_all()
    return states


def restore_rng_states(states: dict[str, Any]) -> None:
    """Undo :func:`collect_rng_states`; a missing entry leaves that generator as it is."""
    if "torch" in states:
        torch.set_rng_state(states["torch"])
    if "numpy" in states:
        kind, keys, pos, has_gauss, gauss = states["numpy"]
        np.random.set_state((kind, np.asarray(keys, dtype=np.uint32), pos, has_gauss, gauss))
    if "python" in states:
        version, internal, gauss_next = states["python"]
        random.setstate((version, tuple(internal), gauss_next))
    cuda = states.get("cuda")
    if cuda and torch.cuda.is_available() and len(cuda) == torch.cuda.device_count():
        torch.cuda.set_rng_state_all(cuda)


class ResumeStateCallback(Callback):
    """Make ``--resume`` continue the run the uninterrupted one would have been.

    - ``state_dict`` / ``load_state_dict``: the RNG states at checkpoint time
      (:func:`collect_rng_states`), so shuffling and dropout continue where they stopped;
    - each epoch's augmentations are seeded from ``(TRAIN_CONFIG.seed, epoch)`` in every
      DataLoader worker (``SegmentationDataset.set_augmentation_epoch``), so a resumed epoch
      draws what it would have drawn, whatever the workers did before;
    - after a resume: ``CosineAnnealingLR`` gets the current config's ``T_max`` and
      ``eta_min`` (:func:`follow_cosine`), ``ReduceLROnPlateau`` its ``patience``, ``factor``
      and ``min_lr``, ``EarlyStopping`` its
      ``patience`` (Lightning restores all of them from the checkpoint), and a run whose
      restored early-stopping state already meets the patience stops before training another
      epoch. Settings a resume cannot apply (the learning rate, the optimizer, the model, ...)
      are refused before the run starts (:mod:`skinet.training.resume`).

    Args:
        cfg: The run's config (the current one, not the checkpoint's).
        train_dataset: The augmented training dataset.
    """

    def __init__(self, cfg: ExperimentConfig, train_dataset: SegmentationDataset) -> None:
        self.cfg = cfg
        self.train_dataset = train_dataset
        self._first_epoch = 0

    def state_dict(self) -> dict[str, Any]:
        return {"rng": collect_rng_states()}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        restore_rng_states(state_dict.get("rng", {}))

    def on_load_checkpoint(
        self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict[str, Any]
    ) -> None:
        # Saved at the end of epoch `epoch`; the first batch is loaded before any epoch hook.
        self._first_epoch = int(checkpoint.get("epoch", -1)) + 1
        self._set_epoch(self._first_epoch)

    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.ckpt_path is None:
            self._set_epoch(0)

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.ckpt_path is not None:
            self._apply_current_settings(trainer)

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._set_epoch(trainer.current_epoch)

    def _set_epoch(self, epoch: int) -> None:
        self.train_dataset.set_augmentation_epoch(epoch, self.cfg.train.seed)

    def _apply_current_settings(self, trainer: L.Trainer) -> None:
        train = self.cfg.train
        cosine = train.cosine_annealing_config
        plateau = train.lr_scheduler_config
        for config in trainer.lr_scheduler_configs:
            if isinstance(config.scheduler, CosineAnnealingLR):
                follow_cosine(config.scheduler, cosine.T_max or train.max_epochs, cosine.eta_min)
            elif isinstance(config.scheduler, ReduceLROnPlateau):
                config.scheduler.patience = plateau.patience
                config.scheduler.factor = plateau.factor
                config.scheduler.min_lrs = [plateau.min_lr] * len(config.scheduler.min_lrs)
                config.scheduler.default_min_lr = plateau.min_lr
        for callback in trainer.callbacks:  # type: ignore[attr-defined]
            if isinstance(callback, EarlyStopping):
                callback.patience = train.early_stopping_config.patience
                if callback.wait_count >= callback.patience:
                    log.info("early stopping had already stopped this run; not training further")
                    trainer.should_stop = True


def follow_cosine(scheduler: CosineAnnealingLR, t_max: int, eta_min: float) -> None:
    """Give a restored cosine a new period or minimum; its learning rate then follows the new
    curve from the epoch reached (``eta_min + (lr - eta_min) * (1 + cos(pi * epoch / T_max)) / 2``),
    where the cosine's own recursive update would continue from the old curve's value (at its
    end, ``eta_min`` for every epoch added)."""
    if (scheduler.T_max, scheduler.eta_min) == (t_max, eta_min):
        return
    scheduler.T_max, scheduler.eta_min = t_max, eta_min
    rates = scheduler._get_closed_form_lr()
    for group, rate in zip(scheduler.optimizer.param_groups, rates, strict=True):
        group["lr"] = rate
    scheduler._last_lr = [float(rate) for rate in rates]


class ResumeAwareLearningRateMonitor(LearningRateMonitor):
    """``LearningRateMonitor`` that does not log a step again that a killed attempt logged.

    A run killed during epoch k has logged epoch k's learning rate; its resume starts epoch k
    again at the same step. The MLflow run's history is read once at the start of a resumed
    fit, and steps already there are skipped.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._logged_steps: set[int] = set()

    def on_train_start(self, trainer: L.Trainer, *args: Any, **kwargs: Any) -> None:
        super().on_train_start(trainer, *args, **kwargs)
        self._logged_steps = set()
        if trainer.ckpt_path is None or not trainer.is_global_zero:
            return
        for logger in trainer.loggers:
            if isinstance(logger, MLFlowLogger) and logger.run_id:
                for name in self.lrs:
                    history = logger.experiment.get_metric_history(logger.run_id, name)
                    self._logged_steps.update(int(m.step) for m in history)

    def on_train_epoch_start(self, trainer: L.Trainer, *args: Any, **kwargs: Any) -> None:
        if trainer.fit_loop.epoch_loop._batches_that_stepped not in self._logged_steps:
            super().on_train_epoch_start(trainer, *args, **kwargs)
        elif self.logging_interval != "step":
            # Not logged again, but still put in trainer.callback_metrics as the parent does.
            self._extract_stats(trainer, "epoch" if self.logging_interval is None else "any")
