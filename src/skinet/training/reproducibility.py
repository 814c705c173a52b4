"""Seeding and deterministic-mode settings applied before anything random is built."""

from __future__ import annotations

import os
from typing import Literal

import lightning as L
import torch

from skinet.config.experiment import ExperimentConfig
from skinet.runtime.devices import resolve_accelerator


def configure_reproducibility(cfg: ExperimentConfig) -> bool | Literal["warn"]:
    """Seed every RNG and choose the deterministic mode for the ``Trainer``.

    Seeds Python, NumPy, torch and DataLoader workers from ``TRAIN_CONFIG.seed``; when
    ``TRANSFORM_CONFIG.seed_value`` is ``None`` (and ``compose_kwargs`` has no ``seed``) it is set
    to the same seed, so augmentations are reproducible too.

    Returns:
        The value for ``Trainer(deterministic=...)``: ``"warn"`` on Apple MPS, which has no
        deterministic mode, else ``TRAIN_CONFIG.deterministic``.
    """
    train_cfg = cfg.train
    L.seed_everything(train_cfg.seed, workers=True, verbose=False)
    if cfg.transform.seed_value is None and "seed" not in cfg.transform.compose_kwargs:
        cfg.transform.seed_value = train_cfg.seed

    deterministic: bool | Literal["warn"] = train_cfg.deterministic
    if deterministic and resolve_accelerator(train_cfg.accelerator) == "mps":
        deterministic = "warn"
    if deterministic is True and torch.cuda.is_available():
        torch.backends.cudnn.deterministic = True
        torch.backends.cudnn.benchmark = False
        # cuBLAS needs a fixed workspace for deterministic matmuls.
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    return deterministic
