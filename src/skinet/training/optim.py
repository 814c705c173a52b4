"""Optimizer and LR-scheduler construction from ``TRAIN_CONFIG``."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch import nn

from skinet.config.train import TrainConfig
from skinet.training.schedules import BudgetCosineLR

OPTIMIZERS: dict[str, Any] = {
    "adam": torch.optim.Adam,
    "adamw": torch.optim.AdamW,
}


def build_optimizer(
    params: Iterable[nn.Parameter], train_cfg: TrainConfig
) -> torch.optim.Optimizer:
    """Adam or AdamW with the configured ``lr`` and ``weight_decay``."""
    if train_cfg.optimizer_name not in OPTIMIZERS:
        raise ValueError(
            f"TRAIN_CONFIG.optimizer_name: unknown {train_cfg.optimizer_name!r}; "
            f"choose one of {sorted(OPTIMIZERS)}"
        )
    optimizer_cls = OPTIMIZERS[train_cfg.optimizer_name]
    return optimizer_cls(params, lr=train_cfg.lr, weight_decay=train_cfg.weight_decay)


def build_lr_scheduler(
    optimizer: torch.optim.Optimizer,
    train_cfg: TrainConfig,
    progress: Callable[[], float] | None = None,
) -> dict[str, Any] | None:
    """The Lightning ``lr_scheduler`` dict for the configured scheduler, or ``None``.

    ``progress`` (the share of the run done, see
    :func:`skinet.training.schedules.run_progress`) drives ``cosine_budget``.
    """
    if not train_cfg.use_lr_scheduler:
        return None
    cosine = train_cfg.cosine_annealing_config
    if train_cfg.scheduler_type == "cosine_budget":
        if progress is None:
            raise ValueError("scheduler_type: cosine_budget needs the run's progress")
        budget = BudgetCosineLR(optimizer, progress, eta_min=cosine.eta_min)
        return {"scheduler": budget, "interval": "step"}
    if train_cfg.scheduler_type == "reduce_on_plateau":
        plateau = train_cfg.lr_scheduler_config
        scheduler: Any = torch.optim.lr_scheduler.ReduceLROnPlateau(
            optimizer,
            mode=plateau.mode,
            patience=plateau.patience,
            factor=plateau.factor,
            min_lr=plateau.min_lr,
        )
        return {"scheduler": scheduler, "monitor": plateau.monitor, "interval": "epoch"}
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(
        optimizer, T_max=cosine.T_max or train_cfg.max_epochs, eta_min=cosine.eta_min
    )
    return {"scheduler": scheduler, "interval": "epoch"}
