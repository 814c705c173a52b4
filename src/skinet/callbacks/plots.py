"""Learning curves, Dice-vs-threshold and prediction overlays written at the end of ``fit``."""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import lightning as L
import numpy as np
import torch
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.utilities import rank_zero_only
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from skinet.callbacks.mlflow_artifacts import mlflow_loggers
from skinet.keys import MetricsKey

log = logging.getLogger(__name__)

# (panel title, y label, train key, val key)
CURVES = (
    ("Loss", "loss", MetricsKey.TRAIN_LOSS, MetricsKey.VAL_LOSS),
    ("Dice", "Dice", MetricsKey.TRAIN_DICE, MetricsKey.VAL_DICE),
    ("IoU", "IoU", MetricsKey.TRAIN_IOU, MetricsKey.VAL_IOU),
)
LEARNING_CURVES_PNG = "learning_curves.png"
THRESHOLD_PNG = "dice_vs_threshold.png"
PREDICTIONS_PNG = "val_predictions.png"


class TrainingPlotsCallback(Callback):
    """Write training plots to ``plot_dir`` at fit end; log them as MLflow artifacts (``plots/``).

    - ``learning_curves.png``: train/val loss, Dice and IoU per epoch, read from
      ``trainer.callback_metrics`` after each epoch;
    - ``dice_vs_threshold.png``: the last validation sweep, ``pl_module.threshold_curve``
      (``{"thresholds", "dice", "optimal_threshold"}``), with the chosen threshold marked;
      with a fixed threshold (curve ``None``) only that threshold is shown;
    - ``val_predictions.png``: the first ``num_images`` validation images with ground-truth
      (green) and predicted (red) contours, predicted at ``pl_module.threshold_used``.

    Args:
        plot_dir: Output folder, usually ``<run_dir>/plots``.
        mean: Per-channel mean used to normalise the images; ``None`` rescales each image
            to [0, 1] for display (``image_per_channel`` normalisation).
        std: Per-channel standard deviation matching ``mean``.
        num_images: Validation images in the overlay grid.
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
        self.plot_dir = Path(plot_dir)
        self.mean = mean
        self.std = std
        self.num_images = num_images
        self.history: dict[str, dict[int, float]] = defaultdict(dict)
        self.threshold_curve: dict[str, Any] | None = None
        self.threshold_used: float | None = None

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.sanity_checking:
            return
        self._record(
            trainer, [val for _, _, _, val in CURVES] + [MetricsKey.VAL_BEST_DICE_AT_THRESHOLD]
        )
        self.threshold_curve = getattr(pl_module, "threshold_curve", None)
        self.threshold_used = _as_float(getattr(pl_module, "threshold_used", None))

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
        self.plot_dir.mkdir(parents=True, exist_ok=True)
        written = []
        for name, make in (
            (LEARNING_CURVES_PNG, self.plot_learning_curves),
            (THRESHOLD_PNG, self.plot_threshold_curve),
            (PREDICTIONS_PNG, lambda: self.plot_predictions(trainer, pl_module)),
        ):
            try:
                figure = make()
            except Exception as exc:  # noqa: BLE001 - a plot must never fail a finished run
                log.warning("could not draw %s: %s", name, exc)
                continue
            if figure is not None:
                path = self.plot_dir / name
                figure.savefig(path, dpi=120)
                written.append(path)
        for logger in mlflow_loggers(trainer):
            for path in written:
                logger.experiment.log_artifact(logger.run_id, str(path), "plots")

    def plot_learning_curves(self) -> Figure | None:
        """Train/val loss, Dice and IoU against epoch; ``None`` before any epoch finished."""
        if not any(self.history.values()):
            return None
        figure = Figure(figsize=(15, 4.2), layout="constrained")
        for ax, (title, ylabel, train_key, val_key) in zip(
            figure.subplots(1, len(CURVES)), CURVES, strict=True
        ):
            for key, label, style in ((train_key, "train", "o-"), (val_key, "validation", "s-")):
                points = sorted(self.history.get(key, {}).items())
                if points:
                    epochs, values = zip(*points, strict=True)
                    ax.plot(epochs, values, style, label=f"{label} ({key})", markersize=4)
            ax.set(title=title, xlabel="epoch", ylabel=ylabel)
            ax.xaxis.get_major_locator().set_params(integer=True)
            ax.grid(alpha=0.3)
            if ax.lines:
                ax.legend()
        figure.suptitle("Learning curves")
        return figure

    def plot_threshold_curve(self) -> Figure | None:
        """Dice against threshold of the last validation sweep; ``None`` with no information."""
        curve, fixed = self.threshold_curve, self.threshold_used
        if curve is None and fixed is None:
            return None
        figure = Figure(figsize=(6.5, 4.5), layout="constrained")
        ax = figure.subplots()
        if curve is not None:
            thresholds = np.asarray(curve["thresholds"], dtype=float)
            dice = np.asarray(curve["dice"], dtype=float)
            order = np.argsort(thresholds)
            ax.plot(
                thresholds[order], dice[order], "-", color="tab:blue", label="Dice (validation)"
            )
            best = float(curve["optimal_threshold"])
            best_dice = float(np.interp(best, thresholds[order], dice[order]))
            ax.axvline(best, color="tab:red", ls="--", label=f"optimal threshold {best:.2f}")
            ax.plot([best], [best_dice], "o", color="tab:red", label=f"Dice {best_dice:.3f}")
            ax.set_ylim(0.0, max(1.0, float(dice.max()) * 1.05))
            ax.set_title("Validation Dice vs threshold (last epoch)")
        elif fixed is not None:
            ax.axvline(fixed, color="tab:red", ls="--", label=f"fixed threshold {fixed:.2f}")
            last_dice = self.history.get(MetricsKey.VAL_BEST_DICE_AT_THRESHOLD, {})
            if last_dice:
                dice_at_fixed = last_dice[max(last_dice)]
                ax.plot(
                    [fixed],
                    [dice_at_fixed],
                    "o",
                    color="tab:red",
                    label=f"Dice {dice_at_fixed:.3f}",
                )
            ax.set_ylim(0.0, 1.0)
            ax.set_title("Fixed threshold (no validation sweep)")
        ax.set(xlim=(0.0, 1.0), xlabel="threshold on sigmoid probability", ylabel="Dice")
        ax.grid(alpha=0.3)
        ax.legend(loc="best")
        return figure

    @torch.no_grad()
    def plot_predictions(self, trainer: L.Trainer, pl_module: L.LightningModule) -> Figure | None:
        """Validation images with ground-truth (green) and predicted (red) contours."""
        images, masks = _first_batches(trainer.val_dataloaders, self.num_images)
        if images is None or masks is None:
            return None
        threshold = _as_float(getattr(pl_module, "threshold_used", None))
        threshold = 0.5 if threshold is None else threshold
        was_training = pl_module.training
        pl_module.eval()
        try:
            inputs = trainer.precision_plugin.convert_input(images.to(pl_module.device))
            with trainer.precision_plugin.forward_context():
                logits = pl_module(inputs)
        finally:
            pl_module.train(was_training)
        preds = (torch.sigmoid(logits.float()) >= threshold).cpu().numpy().reshape(masks.shape)
        return self._overlay_grid(images, masks.numpy() > 0.5, preds, threshold)

    def _overlay_grid(
        self, images: torch.Tensor, masks: np.ndarray, preds: np.ndarray, threshold: float
    ) -> Figure:
        count = images.shape[0]
        cols = min(4, count)
        rows = -(-count // cols)
        figure = Figure(figsize=(3.2 * cols, 3.4 * rows + 0.6), layout="constrained")
        axes = np.atleast_1d(figure.subplots(rows, cols, squeeze=False)).ravel()
        for i, ax in enumerate(axes):
            ax.set_axis_off()
            if i >= count:
                continue
            ax.imshow(self._displayable(images[i]), interpolation="nearest")
            mask, pred = masks[i].reshape(masks.shape[-2:]), preds[i].reshape(preds.shape[-2:])
            # Ground truth drawn wide and solid, prediction dashed on top: both stay visible
            # where they coincide.
            for region, color, width, style in (
                (mask, "lime", 3.0, "solid"),
                (pred, "red", 1.5, "dashed"),
            ):
                if region.any():
                    # Zero padding closes contours that touch (or fill) the image border.
                    height, width_px = region.shape
                    ax.contour(
                        np.arange(-1, width_px + 1),
                        np.arange(-1, height + 1),
                        np.pad(region.astype(float), 1),
                        levels=[0.5],
                        colors=color,
                        linewidths=width,
                        linestyles=style,
                    )
            ax.set(xlim=(-0.5, mask.shape[1] - 0.5), ylim=(mask.shape[0] - 0.5, -0.5))
            ax.set_title(f"val #{i}  Dice {_dice(pred, mask):.3f}", fontsize=10)
        handles = [
            Line2D([], [], color="lime", lw=3, label="ground truth"),
            Line2D(
                [], [], color="red", lw=1.5, ls="--", label=f"prediction (p >= {threshold:.2f})"
            ),
        ]
        figure.legend(handles=handles, loc="outside lower center", ncols=2)
        figure.suptitle("Validation predictions")
        return figure

    def _displayable(self, image: torch.Tensor) -> np.ndarray:
        """(C, H, W) normalised tensor -> (H, W, 3) array on [0, 1]."""
        array = image.float().cpu().numpy()
        if self.mean is not None and self.std is not None and len(self.mean) == array.shape[0]:
            std = np.asarray(self.std, dtype=np.float32)[:, None, None]
            array = array * std + np.asarray(self.mean, dtype=np.float32)[:, None, None]
        else:
            low, high = float(array.min()), float(array.max())
            array = (array - low) / (high - low) if high > low else np.zeros_like(array)
        array = np.clip(array, 0.0, 1.0).transpose(1, 2, 0)
        return np.repeat(array, 3, axis=2) if array.shape[2] == 1 else array[..., :3]


def _first_batches(loaders: Any, limit: int) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """Up to ``limit`` (images, masks) from the first validation loader."""
    if isinstance(loaders, list | tuple):
        loaders = loaders[0] if loaders else None
    elif isinstance(loaders, dict):
        loaders = next(iter(loaders.values()), None)
    if loaders is None:
        return None, None
    images, masks, count = [], [], 0
    for batch in loaders:
        batch_images, batch_masks = batch[0], batch[1]
        images.append(batch_images)
        masks.append(batch_masks)
        count += batch_images.shape[0]
        if count >= limit:
            break
    if not images:
        return None, None
    return torch.cat(images)[:limit], torch.cat(masks)[:limit].float()


def _dice(pred: np.ndarray, mask: np.ndarray) -> float:
    total = pred.sum() + mask.sum()
    return 1.0 if total == 0 else float(2.0 * np.logical_and(pred, mask).sum() / total)


def _as_float(value: Any) -> float | None:
    if value is None:
        return None
    return float(value.item() if hasattr(value, "item") else value)
