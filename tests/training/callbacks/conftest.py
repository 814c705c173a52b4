"""A tiny segmentation LightningModule, random data and configs for callback tests."""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any

import lightning as L
import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from skinet.config.experiment import ExperimentConfig, parse_config
from skinet.metrics.thresholds import ThresholdResult, find_best_threshold

IMAGE_SIZE = 16
BATCH_SIZE = 4


class TinySegModel(L.LightningModule):
    """A 1-conv "U-Net" on (B, 3, 16, 16) images with the LightningModel's logging contract.

    Logs ``train_/val_`` loss, Dice and IoU per epoch, sweeps thresholds at each validation
    epoch end (``val_best_dice_at_threshold``) with the reference ``find_best_threshold`` and
    sets ``val_threshold_result`` and ``threshold_used`` like
    ``skinet.training.lightning_model.LightningModel``.
    """

    def __init__(
        self,
        lr: float = 0.05,
        fail_at_step: int | None = None,
        step_sleep_s: float = 0.0,
        fixed_threshold: float | None = None,
    ) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.net = nn.Conv2d(3, 1, kernel_size=3, padding=1)
        self.val_threshold_result: ThresholdResult | None = None
        self.threshold_used = 0.5 if fixed_threshold is None else fixed_threshold
        self._val_probs: list[torch.Tensor] = []
        self._val_masks: list[torch.Tensor] = []

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.net(images)

    def _shared_step(self, batch: tuple[torch.Tensor, torch.Tensor], stage: str) -> torch.Tensor:
        images, masks = batch
        logits = self(images)
        loss = F.binary_cross_entropy_with_logits(logits, masks)
        preds = (torch.sigmoid(logits) >= 0.5).float()
        tp, fp, fn = (preds * masks).sum(), (preds * (1 - masks)).sum(), ((1 - preds) * masks).sum()
        dice = 2 * tp / (2 * tp + fp + fn).clamp_min(1e-6)
        iou = tp / (tp + fp + fn).clamp_min(1e-6)
        for name, value in (("loss", loss), ("dice", dice), ("iou", iou)):
            self.log(f"{stage}_{name}", value, on_step=False, on_epoch=True, batch_size=len(images))
        return logits

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> Any:
        if self.hparams.fail_at_step is not None and self.global_step >= self.hparams.fail_at_step:
            raise RuntimeError("boom: training_step failed on purpose")
        if self.hparams.step_sleep_s:
            time.sleep(self.hparams.step_sleep_s)
        images, masks = batch
        self._shared_step(batch, "train")
        return F.binary_cross_entropy_with_logits(self(images), masks)

    def validation_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> None:
        logits = self._shared_step(batch, "val")
        self._val_probs.append(torch.sigmoid(logits).flatten())
        self._val_masks.append(batch[1].flatten())

    def on_validation_epoch_end(self) -> None:
        probs, masks = torch.cat(self._val_probs), torch.cat(self._val_masks)
        self._val_probs.clear()
        self._val_masks.clear()
        fixed = self.hparams.fixed_threshold
        thresholds = None if fixed is None else torch.tensor([float(fixed)])
        result = find_best_threshold(probs[None, None], masks[None, None] > 0.5, thresholds)
        self.val_threshold_result = result
        self.threshold_used = float(result.optimal_threshold)
        self.log("val_best_dice_at_threshold", result.best_dice)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.parameters(), lr=self.hparams.lr)


def make_loader(num: int, seed: int) -> DataLoader:
    """Random images with bright discs as masks: (B, 3, 16, 16) images, (B, 1, 16, 16) masks."""
    gen = torch.Generator().manual_seed(seed)
    yy, xx = torch.meshgrid(torch.arange(IMAGE_SIZE), torch.arange(IMAGE_SIZE), indexing="ij")
    centers = torch.randint(4, IMAGE_SIZE - 4, (num, 2), generator=gen)
    radii = torch.randint(2, 5, (num,), generator=gen)
    dist2 = (yy[None] - centers[:, 0, None, None]) ** 2 + (
        xx[None] - centers[:, 1, None, None]
    ) ** 2
    masks = (dist2 <= radii[:, None, None] ** 2).float()[:, None]
    images = torch.randn(num, 3, IMAGE_SIZE, IMAGE_SIZE, generator=gen) * 0.3 + masks * 1.5
    return DataLoader(TensorDataset(images, masks), batch_size=BATCH_SIZE)


def raw_config(tmp_path: Path, **train: Any) -> dict[str, Any]:
    """Plain-data config writing under ``tmp_path`` with ``TRAIN_CONFIG`` overrides."""
    return {
        "TRAIN_CONFIG": {
            "experiment_name": "tiny",
            "output_dir": str(tmp_path / "runs"),
            "batch_size": BATCH_SIZE,
            "num_workers": 0,
            "max_epochs": 2,
            "accelerator": "cpu",
            "system_metrics_interval_sec": 0.05,
            "enable_progress_bar": False,
            "num_sanity_val_steps": 0,
            "log_every_n_steps": 1,
            **train,
        },
        "DATA_CONFIG": {"dataset": "synthetic", "image_size": IMAGE_SIZE},
        "SWEEP_CONFIG": {"monitor": "val_best_dice_at_threshold"},
    }


def make_config(tmp_path: Path, **train: Any) -> ExperimentConfig:
    """Validated config from :func:`raw_config`."""
    return parse_config(raw_config(tmp_path, **train))


def make_trainer(
    loggers: list[Any], callbacks: list[Any], tmp_path: Path, **kwargs: Any
) -> L.Trainer:
    """A quiet CPU trainer as ``skinet.training.run`` would build it."""
    options: dict[str, Any] = {
        "max_epochs": 2,
        "accelerator": "cpu",
        "devices": 1,
        "logger": loggers or False,
        "callbacks": callbacks,
        "enable_progress_bar": False,
        "enable_model_summary": False,
        "num_sanity_val_steps": 0,
        "log_every_n_steps": 1,
        "default_root_dir": str(tmp_path),
        **kwargs,
    }
    return L.Trainer(**options)


@pytest.fixture
def loaders() -> tuple[DataLoader, DataLoader]:
    """8 training and 8 validation samples in batches of 4."""
    return make_loader(8, seed=0), make_loader(8, seed=1)


@pytest.fixture
def seg_model_cls() -> type[TinySegModel]:
    """The tiny LightningModule class (fixtures avoid importing between conftest files)."""
    return TinySegModel


@pytest.fixture
def config_factory(tmp_path: Path) -> Any:
    """``config_factory(**train_overrides) -> ExperimentConfig`` writing under ``tmp_path``."""
    return lambda **train: make_config(tmp_path, **train)


@pytest.fixture
def trainer_factory(tmp_path: Path) -> Any:
    """``trainer_factory(loggers, callbacks, **trainer_kwargs) -> Trainer``."""
    return lambda loggers, callbacks, **kw: make_trainer(loggers, callbacks, tmp_path, **kw)


@pytest.fixture
def copy_mlflow_db(mlflow_db_template: Path) -> Any:
    """``copy_mlflow_db(dest) -> "sqlite:///dest"``: a fresh, initialised store at ``dest``."""

    def copy(dest: Path) -> str:
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(mlflow_db_template, dest)
        return f"sqlite:///{dest}"

    return copy
