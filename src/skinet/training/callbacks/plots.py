"""Learning curves, Dice-vs-threshold and the worst validation predictions, written at fit end.

This callback only gathers the data (per-epoch metrics, learning rates, each epoch's threshold
sweep, the best checkpoint's predictions); the drawing is :mod:`skinet.evaluation.figures`.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, NamedTuple, Protocol, runtime_checkable

import lightning as L
import numpy as np
import torch
from lightning.pytorch.callbacks import Callback, ModelCheckpoint
from lightning.pytorch.utilities import rank_zero_only
from matplotlib.figure import Figure
from torch.utils.data import DataLoader, SequentialSampler

from skinet.checkpoints.threshold import DEFAULT_THRESHOLD
from skinet.evaluation.figures import (
    CURVES,
    plot_learning_curves,
    plot_overlay_grid,
    plot_threshold_curve,
    save_figure,
    to_display_image,
)
from skinet.keys import MetricsKey
from skinet.metrics.thresholds import ThresholdResult
from skinet.training.callbacks.mlflow_artifacts import best_checkpoint, mlflow_loggers
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
    """Write training plots to ``plot_dir`` at fit end; log them as MLflow artifacts (``plots/``).

    The *reported epoch* is the best checkpoint's (the first ``ModelCheckpoint``'s
    ``best_model_path``); without a checkpoint it is the last validated epoch.

    - ``learning_curves.png``: train/val loss, Dice and IoU per epoch and the learning rate
      (first parameter group) per epoch, with the best checkpoint's epoch marked;
    - ``dice_vs_threshold.png``: the validation threshold sweep of the reported epoch
      (``pl_module.val_threshold_result``), with the chosen threshold marked; with a fixed
      threshold only that threshold and its Dice;
    - ``val_predictions.png``: the ``num_images`` validation images with the lowest Jaccard under
      the reported epoch's weights and threshold, with ground-truth (green) and predicted (red)
      contours and their Jaccard and Dice.

    Args:
        plot_dir: Output folder, usually ``<run_dir>/plots``.
        mean: Per-channel mean used to normalise the images; ``None`` rescales each image
            to [0, 1] for display (``image_per_channel`` normalisation). Only used when the
            validation set is not a :class:`~skinet.training.data.dataset.SegmentationDataset`,
            whose raw
            images are shown instead.
        std: Per-channel standard deviation matching ``mean``.
        num_images: Validation images in the failure grid.
    """

    def __init__(
        self,
        plot_dir: str | Path,
        mean: Sequence[float] | None = None,
        std: Sequence[float] | None = None,
        num_images: int = 8,
    ) -> None:
        if (mean is None) != (std is None):
            raise ValueError("mean and std must be given together")
        if num_images < 1:
            raise ValueError(f"num_images must be at least 1, got {num_images}")
        self.plot_dir = Path(plot_dir)
        self.mean = mean
        self.std = std
        self.num_images = num_images
        self.history: dict[str, dict[int, float]] = defaultdict(dict)
        self.learning_rates: dict[int, float] = {}
        self.threshold_results: dict[int, ThresholdResult] = {}
        self.thresholds_used: dict[int, float] = {}
        self.reported_epoch: int | None = None
        self.from_checkpoint = False

    def state_dict(self) -> dict[str, Any]:
        """The per-epoch records, saved in every checkpoint: a resumed run draws every epoch."""
        return {
            "history": {str(key): dict(values) for key, values in self.history.items()},
            "learning_rates": dict(self.learning_rates),
            "thresholds_used": dict(self.thresholds_used),
            "threshold_results": {
                epoch: {name: value.detach().cpu() for name, value in vars(result).items()}
                for epoch, result in self.threshold_results.items()
            },
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        for key, values in state_dict.get("history", {}).items():
            self.history[key].update({int(epoch): float(v) for epoch, v in values.items()})
        self.learning_rates.update(
            {int(e): float(v) for e, v in state_dict.get("learning_rates", {}).items()}
        )
        self.thresholds_used.update(
            {int(e): float(v) for e, v in state_dict.get("thresholds_used", {}).items()}
        )
        for epoch, fields in state_dict.get("threshold_results", {}).items():
            self.threshold_results[int(epoch)] = ThresholdResult(**fields)

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.optimizers:
            lr = trainer.optimizers[0].param_groups[0]["lr"]
            self.learning_rates[trainer.current_epoch] = float(lr)

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.sanity_checking:
            return
        self._record(
            trainer, [val for _, _, _, val in CURVES] + [MetricsKey.VAL_BEST_DICE_AT_THRESHOLD]
        )
        if isinstance(pl_module, ThresholdedModule):
            epoch = trainer.current_epoch
            self.thresholds_used[epoch] = float(pl_module.threshold_used)
            if pl_module.val_threshold_result is not None:
                self.threshold_results[epoch] = pl_module.val_threshold_result

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        # Epoch-level train metrics are in callback_metrics here (they are reduced on access).
        self._record(trainer, [train for _, _, train, _ in CURVES])

    def _record(self, trainer: L.Trainer, keys: Iterable[str]) -> None:
        metrics = trainer.callback_metrics
        for key in keys:
            value = metrics.get(key)
            if value is None:
                value = metrics.get(f"{key}_epoch")
            if value is not None:
                self.history[key][trainer.current_epoch] = float(value)

    @rank_zero_only
    def on_fit_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        best_state = self._load_best_checkpoint(trainer)
        validated = sorted(self.thresholds_used) or sorted(self.threshold_results)
        if self.reported_epoch is None and validated:
            self.reported_epoch = validated[-1]
        makers: tuple[tuple[str, Callable[[], Figure | None]], ...] = (
            (LEARNING_CURVES_PNG, self.plot_learning_curves),
            (THRESHOLD_PNG, self.plot_threshold_curve),
            (PREDICTIONS_PNG, lambda: self.plot_predictions(trainer, pl_module, best_state)),
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
        for logger in mlflow_loggers(trainer):
            for path in written:
                logger.experiment.log_artifact(logger.run_id, str(path), "plots")

    def _load_best_checkpoint(self, trainer: L.Trainer) -> dict[str, torch.Tensor] | None:
        """The best checkpoint's weights; sets :attr:`reported_epoch` to its epoch.

        Only a checkpoint that monitors a metric has a best; one without (Lightning's default)
        keeps the latest, which is the last epoch anyway.
        """
        callback = trainer.checkpoint_callback
        path = best_checkpoint(trainer)
        if path is None or not isinstance(callback, ModelCheckpoint) or callback.monitor is None:
            return None
        try:
            checkpoint = torch.load(path, map_location="cpu", weights_only=True)
        except Exception as exc:  # noqa: BLE001 - fall back to the last epoch's plots
            log.warning("could not read the best checkpoint %s for the plots: %s", path, exc)
            return None
        self.reported_epoch = int(checkpoint["epoch"])
        self.from_checkpoint = True
        return checkpoint["state_dict"]

    def _epoch_label(self) -> str:
        where = "best checkpoint" if self.from_checkpoint else "last epoch"
        return f"epoch {self.reported_epoch}, {where}"

    def plot_learning_curves(self) -> Figure | None:
        """Loss, Dice, IoU and learning rate per epoch; ``None`` before any epoch finished."""
        return plot_learning_curves(
            self.history,
            best_epoch=self.reported_epoch if self.from_checkpoint else None,
            learning_rates=self.learning_rates,
            best_label=f"best checkpoint (epoch {self.reported_epoch})",
        )

    def plot_threshold_curve(self) -> Figure | None:
        """Dice against threshold of the reported epoch; ``None`` without a sweep."""
        if self.reported_epoch is None or self.reported_epoch not in self.threshold_results:
            return None
        result = self.threshold_results[self.reported_epoch]
        kind = "Dice vs threshold" if result.thresholds.numel() > 1 else "Fixed threshold"
        return plot_threshold_curve(result, f"Validation {kind} ({self._epoch_label()})")

    @torch.no_grad()
    def plot_predictions(
        self,
        trainer: L.Trainer,
        pl_module: L.LightningModule,
        state_dict: dict[str, torch.Tensor] | None = None,
    ) -> Figure | None:
        """The worst validation images by Jaccard under ``state_dict`` (else current) weights."""
        loader = _validation_loader(trainer)
        if loader is None:
            return None
        threshold = self.thresholds_used.get(
            -1 if self.reported_epoch is None else self.reported_epoch
        )
        if threshold is None:
            threshold = (
                float(pl_module.threshold_used)
                if isinstance(pl_module, ThresholdedModule)
                else DEFAULT_THRESHOLD
            )
        current = None
        if state_dict is not None:
            current = {k: v.detach().clone() for k, v in pl_module.state_dict().items()}
            pl_module.load_state_dict(state_dict)
        was_training = pl_module.training
        pl_module.eval()
        try:
            worst = self._worst_images(trainer, pl_module, loader, threshold)
        finally:
            pl_module.train(was_training)
            if current is not None:
                pl_module.load_state_dict(current)
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
            preds = (torch.sigmoid(logits.float()) >= threshold).flatten(1).cpu()
            targets = (masks > 0.5).flatten(1).cpu()
            tp = (preds & targets).sum(1)
            union = (preds | targets).sum(1)
            total = preds.sum(1) + targets.sum(1)
            # Both empty scores 1, as in the threshold sweep and ``skinet evaluate``.
            jaccard = torch.where(union == 0, 1.0, tp / union.clamp_min(1))
            dice = torch.where(total == 0, 1.0, 2 * tp / total.clamp_min(1))
            shape = masks.shape[-2:]
            for i in torch.argsort(jaccard, stable=True)[: self.num_images].tolist():
                if raw:
                    image = dataset.load_raw(seen + i)[0]  # type: ignore[attr-defined]
                else:
                    image = to_display_image(images[i].float().cpu().numpy(), self.mean, self.std)
                worst.append(
                    ScoredImage(
                        float(jaccard[i]),
                        float(dice[i]),
                        seen + i,
                        image,
                        targets[i].reshape(shape).numpy(),
                        preds[i].reshape(shape).numpy(),
                    )
                )
            worst = sorted(worst, key=lambda s: (s.jaccard, s.position))[: self.num_images]
            seen += images.shape[0]
        return worst


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
