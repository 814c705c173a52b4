"""Learning curves, Dice-vs-threshold and the worst validation predictions, written at fit end.

The records drawn are the run's own (:class:`~skinet.training.callbacks.epoch_history.
EpochMetricsHistory`); this callback scores the kept checkpoint's validation predictions and
hands everything to the drawing, :mod:`skinet.evaluation.figures`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from pathlib import Path
from typing import Any, NamedTuple, Protocol, runtime_checkable

import lightning as L
import numpy as np
import torch
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.utilities import rank_zero_only
from matplotlib.figure import Figure
from torch.utils.data import DataLoader, SequentialSampler

from skinet.checkpoints.threshold import DEFAULT_THRESHOLD
from skinet.evaluation.figures import (
    plot_learning_curves,
    plot_overlay_grid,
    plot_threshold_curve,
    save_figure,
    to_display_image,
)
from skinet.metrics.masks import MaskMetrics
from skinet.metrics.thresholds import ThresholdResult, compute_threshold_counts
from skinet.training.callbacks.epoch_history import BestCheckpoint, EpochMetricsHistory
from skinet.training.callbacks.mlflow_artifacts import log_artifacts
from skinet.training.data.dataset import SegmentationDataset

log = logging.getLogger(__name__)

LEARNING_CURVES_PNG = "learning_curves.png"
THRESHOLD_PNG = "dice_vs_threshold.png"
PREDICTIONS_PNG = "val_predictions.png"


@runtime_checkable
class ThresholdedModule(Protocol):
    """What the plots read from a LightningModule
    (``skinet.training.lightning_model.LightningModel`` has it)."""

    threshold_used: float
    """Threshold applied to the predictions; after a validation epoch, the one it chose."""
    val_threshold_result: ThresholdResult | None
    """The last validation sweep."""


class ScoredImage(NamedTuple):
    """One validation image of the failure grid."""

    jaccard: float
    dice: float
    position: int
    image: np.ndarray
    mask: np.ndarray
    pred: np.ndarray


class TrainingPlotsCallback(Callback):
    """Draw the training plots to ``plot_dir`` at fit end from the run's epoch records.

    Everything drawn comes from ``history`` (an :class:`EpochMetricsHistory` among the trainer's
    callbacks): the per-epoch metrics, learning rates, threshold sweeps and the kept checkpoint.
    The *reported epoch* is the kept checkpoint's (the first monitored ``ModelCheckpoint``'s: the
    best epoch, or the last with ``select: last``); without one it is the last validated epoch.
    The PNGs go to every MLflow logger (``plots/``).

    - ``learning_curves.png``: train/val loss, Dice and IoU per epoch and the learning rate
      (first parameter group) per epoch, with the kept checkpoint's epoch marked;
    - ``dice_vs_threshold.png``: the validation threshold sweep of the reported epoch, with the
      chosen threshold marked; with a fixed threshold only that threshold and its Dice;
    - ``val_predictions.png``: the ``num_images`` validation images with the lowest Jaccard under
      the reported epoch's weights and threshold, with ground-truth (green) and predicted (red)
      contours and their Jaccard and Dice.

    Args:
        plot_dir: Output folder, usually ``<run_dir>/plots``.
        history: The run's epoch records; it must be one of the trainer's callbacks too.
        mean: Per-channel mean used to normalise the images; ``None`` rescales each image
            to [0, 1] for display (``image_per_channel`` normalisation). Only used when the
            validation set is not a :class:`~skinet.training.data.dataset.SegmentationDataset`,
            whose raw images are shown instead.
        std: Per-channel standard deviation matching ``mean``.
        num_images: Validation images in the failure grid.
        kept_epoch: The kept checkpoint's epoch in words, as the legends and titles name it
            (``CheckpointConfig.kept_epoch``: ``best epoch`` or ``last epoch``).
    """

    def __init__(
        self,
        plot_dir: str | Path,
        history: EpochMetricsHistory,
        mean: Sequence[float] | None = None,
        std: Sequence[float] | None = None,
        num_images: int = 8,
        kept_epoch: str = "best epoch",
    ) -> None:
        if (mean is None) != (std is None):
            raise ValueError("mean and std must be given together")
        if num_images < 1:
            raise ValueError(f"num_images must be at least 1, got {num_images}")
        self.plot_dir = Path(plot_dir)
        self.history = history
        self.mean = mean
        self.std = std
        self.num_images = num_images
        self.kept_epoch = kept_epoch
        self.reported_epoch: int | None = None
        self.from_checkpoint = False

    @rank_zero_only
    def on_fit_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        best = self.history.best_checkpoint(trainer)
        validated = sorted(self.history.thresholds) or sorted(self.history.sweeps)
        self.from_checkpoint = best is not None
        last = validated[-1] if validated else None
        self.reported_epoch = best.epoch if best is not None else last
        makers: tuple[tuple[str, Callable[[], Figure | None]], ...] = (
            (LEARNING_CURVES_PNG, self.plot_learning_curves),
            (THRESHOLD_PNG, self.plot_threshold_curve),
            (PREDICTIONS_PNG, lambda: self.plot_predictions(trainer, pl_module, best)),
        )
        written = []
        for name, make in makers:
            try:
                figure = make()
            except Exception as exc:  # noqa: BLE001 - a plot must never fail a finished run
                log.warning("could not draw %s: %s", name, exc)
                continue
            if figure is not None:
                written.append(save_figure(figure, self.plot_dir / name))
        log_artifacts(trainer, written, "plots")

    def _epoch_label(self) -> str:
        where = f"{self.kept_epoch} kept" if self.from_checkpoint else "last epoch"
        return f"epoch {self.reported_epoch}, {where}"

    def plot_learning_curves(self) -> Figure | None:
        """Loss, Dice, IoU and learning rate per epoch; ``None`` before any epoch finished."""
        return plot_learning_curves(
            self.history.curves(),
            best_epoch=self.reported_epoch if self.from_checkpoint else None,
            learning_rates=self.history.learning_rates,
            best_label=f"{self.kept_epoch} kept (epoch {self.reported_epoch}, 0-based)",
        )

    def plot_threshold_curve(self) -> Figure | None:
        """Dice against threshold of the reported epoch; ``None`` without a sweep."""
        if self.reported_epoch is None or self.reported_epoch not in self.history.sweeps:
            return None
        result = self.history.sweeps[self.reported_epoch]
        kind = "Dice vs threshold" if result.thresholds.numel() > 1 else "Fixed threshold"
        return plot_threshold_curve(result, f"Validation {kind} ({self._epoch_label()})")

    @torch.no_grad()
    def plot_predictions(
        self,
        trainer: L.Trainer,
        pl_module: L.LightningModule,
        best: BestCheckpoint | None = None,
    ) -> Figure | None:
        """The worst validation images by Jaccard under ``best``'s (else the current) weights."""
        loader = _validation_loader(trainer)
        if loader is None:
            return None
        threshold = self.history.thresholds.get(
            -1 if self.reported_epoch is None else self.reported_epoch
        )
        if threshold is None:
            threshold = (
                float(pl_module.threshold_used)
                if isinstance(pl_module, ThresholdedModule)
                else DEFAULT_THRESHOLD
            )
        was_training = pl_module.training
        pl_module.eval()
        try:
            with best.loaded_into(pl_module) if best is not None else nullcontext():
                worst = self._worst_images(trainer, pl_module, loader, threshold)
        finally:
            pl_module.train(was_training)
        if not worst:
            return None
        dataset = loader.dataset
        named = isinstance(dataset, SegmentationDataset) and isinstance(
            loader.sampler, SequentialSampler
        )
        titles = [
            f"{dataset.samples[s.position].id if named else f'val #{s.position}'}\n"  # type: ignore[attr-defined]
            f"Jaccard {s.jaccard:.3f}  Dice {s.dice:.3f}"
            for s in worst
        ]
        return plot_overlay_grid(
            [s.image for s in worst],
            [s.mask for s in worst],
            [s.pred for s in worst],
            titles,
            f"{len(worst)} worst validation images by Jaccard ({self._epoch_label()})",
            threshold=threshold,
        )

    def _worst_images(
        self,
        trainer: L.Trainer,
        pl_module: L.LightningModule,
        loader: DataLoader,
        threshold: float,
    ) -> list[ScoredImage]:
        dataset = loader.dataset
        raw = isinstance(dataset, SegmentationDataset) and isinstance(
            loader.sampler, SequentialSampler
        )
        worst: list[ScoredImage] = []
        seen = 0
        for batch in loader:
            images, masks = batch[0], batch[1]
            inputs = trainer.precision_plugin.convert_input(images.to(pl_module.device))
            with trainer.precision_plugin.forward_context():
                logits = pl_module(inputs)
            probs = torch.sigmoid(logits.float()).flatten(1).cpu()
            targets = (masks > 0.5).flatten(1).cpu()
            scores = image_scores(probs, targets, threshold)
            shape = masks.shape[-2:]
            order = sorted(range(len(scores)), key=lambda i: scores[i].jaccard)
            for i in order[: self.num_images]:
                if raw:
                    image = dataset.load_raw(seen + i)[0]  # type: ignore[attr-defined]
                else:
                    image = to_display_image(images[i].float().cpu().numpy(), self.mean, self.std)
                worst.append(
                    ScoredImage(
                        scores[i].jaccard,
                        scores[i].dice,
                        seen + i,
                        image,
                        targets[i].reshape(shape).numpy(),
                        (probs[i] >= threshold).reshape(shape).numpy(),
                    )
                )
            worst = sorted(worst, key=lambda s: (s.jaccard, s.position))[: self.num_images]
            seen += images.shape[0]
        return worst


def image_scores(probs: torch.Tensor, targets: torch.Tensor, threshold: float) -> list[MaskMetrics]:
    """Each image's counts at ``threshold`` (``(B, P)`` probabilities and bool masks), by the
    threshold sweep's counting and the per-image metrics of ``skinet evaluate`` (both empty: 1)."""
    counts = compute_threshold_counts(probs, targets, torch.tensor([float(threshold)]))[:, 0]
    return [MaskMetrics(int(tp), int(fp), int(fn), 0) for tp, fp, fn in counts.tolist()]


def _validation_loader(trainer: L.Trainer) -> DataLoader | None:
    """The first validation loader; under DDP a plain one over its whole dataset."""
    loaders: Any = trainer.val_dataloaders
    if isinstance(loaders, list | tuple):
        loaders = loaders[0] if loaders else None
    elif isinstance(loaders, dict):
        loaders = next(iter(loaders.values()), None)
    if not isinstance(loaders, DataLoader):
        return None
    if trainer.world_size > 1:
        # Rank 0 alone draws: its distributed sampler would show only its shard.
        return DataLoader(
            loaders.dataset,
            batch_size=loaders.batch_size,
            collate_fn=loaders.collate_fn,
        )
    return loaders
