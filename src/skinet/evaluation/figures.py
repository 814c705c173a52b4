"""Every figure SkiNet draws, as pure functions of arrays: data in, ``Figure`` out.

Training callbacks and ``skinet evaluate`` gather the data and call these; nothing here imports
Lightning or touches a trainer, so a prediction-only install can draw the same figures. Figures
are built on matplotlib's object API (``Figure``, no ``pyplot`` state), so drawing is safe in
worker threads and never opens a window. (The Optuna study plots stay with the sweep.)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from skinet.keys import MetricsKey

if TYPE_CHECKING:
    from matplotlib.axes import Axes

    from skinet.metrics.thresholds import ThresholdResult

CURVES = (
    ("Loss", "loss", MetricsKey.TRAIN_LOSS, MetricsKey.VAL_LOSS),
    ("Dice", "Dice", MetricsKey.TRAIN_DICE, MetricsKey.VAL_DICE),
    ("IoU", "IoU", MetricsKey.TRAIN_IOU, MetricsKey.VAL_IOU),
)
"""Learning-curve panels: (title, y label, train key, validation key)."""

GROUND_TRUTH_COLOR = "lime"
PREDICTION_COLOR = "red"

History = Mapping[str, Mapping[int, float]]
"""Metric name -> {epoch: value}."""


def save_figure(figure: Figure, path: Path, dpi: int = 120) -> Path:
    """Write ``figure`` as a PNG (parent folders created); return ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=dpi)
    return path


def plot_learning_curves(
    history: History,
    best_epoch: int | None = None,
    learning_rates: Mapping[int, float] | None = None,
    best_label: str = "best epoch",
) -> Figure | None:
    """Train/val loss, Dice and IoU per epoch, the learning rate, and the kept epoch marked.

    Args:
        history: Per-epoch values of the :data:`CURVES` keys.
        best_epoch: Epoch of the kept checkpoint (the best, or the last with
            ``select: last``); a dashed line in every panel. Where ``history`` holds
            ``train_image_size`` (progressive resizing), a dotted line marks each epoch it
            changes at.
        learning_rates: Learning rate per epoch (first parameter group); a fourth panel.
        best_label: Legend text of that line.

    Returns:
        The figure, or ``None`` before any epoch finished.
    """
    if not any(history.get(key) for _, _, *keys in CURVES for key in keys):
        return None
    panels = len(CURVES) + (1 if learning_rates else 0)
    figure = Figure(figsize=(5 * panels, 4.2), layout="constrained")
    axes = np.atleast_1d(figure.subplots(1, panels)).tolist()
    for ax, (title, ylabel, train_key, val_key) in zip(axes, CURVES, strict=False):
        for key, label, style in ((train_key, "train", "o-"), (val_key, "validation", "s-")):
            points = sorted(history.get(key, {}).items())
            if points:
                epochs, values = zip(*points, strict=True)
                ax.plot(epochs, values, style, label=f"{label} ({key})", markersize=4)
        ax.set(title=title, ylabel=ylabel)
    if learning_rates:
        _plot_learning_rates(axes[-1], learning_rates)
    marks = [
        (epoch, "tab:gray", ":", f"training at {size} px from epoch {epoch} (0-based)")
        for epoch, size in _size_switches(history.get(MetricsKey.TRAIN_IMAGE_SIZE, {}))
    ]
    if best_epoch is not None:
        marks.append((best_epoch, "tab:red", "--", best_label))
    for ax in axes:
        for epoch, color, style, label in marks:
            ax.axvline(epoch, color=color, ls=style, lw=1.2, label=label)
        ax.set_xlabel("epoch (0-based, as in best-epoch=NNN.ckpt)")
        ax.xaxis.get_major_locator().set_params(integer=True)
        ax.grid(alpha=0.3)
        if ax.lines:
            ax.legend(fontsize=8)
    figure.suptitle("Learning curves")
    return figure


def _plot_learning_rates(ax: Axes, learning_rates: Mapping[int, float]) -> None:
    epochs, values = zip(*sorted(learning_rates.items()), strict=True)
    ax.plot(epochs, values, "d-", color="tab:purple", markersize=4, label="learning rate")
    positive = [v for v in values if v > 0]
    if positive and max(positive) > 10 * min(positive):
        ax.set_yscale("log")
    ax.set(title="Learning rate", ylabel="lr (first parameter group)")


def _size_switches(sizes: Mapping[int, float]) -> list[tuple[int, int]]:
    """``(epoch, side)`` where ``train_image_size`` changes (progressive resizing)."""
    points = sorted(sizes.items())
    return [
        (epoch, int(size))
        for (_, before), (epoch, size) in zip(points, points[1:], strict=False)
        if size != before
    ]


def _values(tensor: object) -> np.ndarray:
    """A tensor (any device) or array as a float64 array."""
    values = tensor.tolist() if hasattr(tensor, "tolist") else tensor
    return np.atleast_1d(np.asarray(values, dtype=float))


def plot_threshold_curve(result: ThresholdResult, title: str) -> Figure:
    """Validation Dice against threshold, the chosen threshold and its Dice marked.

    A result with one threshold (a fixed ``optimal_threshold``, no sweep) is drawn as that
    threshold and its Dice only.
    """
    thresholds, dice = _values(result.thresholds), _values(result.dice_per_threshold)
    chosen, chosen_dice = (
        float(_values(result.optimal_threshold)[0]),
        float(_values(result.best_dice)[0]),
    )
    figure = Figure(figsize=(6.5, 4.5), layout="constrained")
    ax = figure.subplots()
    if thresholds.size > 1:
        order = np.argsort(thresholds)
        ax.plot(thresholds[order], dice[order], "-", color="tab:blue", label="Dice (validation)")
        label = f"optimal threshold {chosen:.2f}"
    else:
        label = f"fixed threshold {chosen:.2f}"
    ax.axvline(chosen, color="tab:red", ls="--", label=label)
    ax.plot([chosen], [chosen_dice], "o", color="tab:red", label=f"Dice {chosen_dice:.3f}")
    ax.set_ylim(0.0, max(1.0, float(dice.max()) * 1.05))
    ax.set(xlim=(0.0, 1.0), xlabel="threshold on sigmoid probability", ylabel="Dice", title=title)
    ax.grid(alpha=0.3)
    ax.legend(loc="best")
    return figure


def to_display_image(
    image: np.ndarray, mean: Sequence[float] | None = None, std: Sequence[float] | None = None
) -> np.ndarray:
    """A normalised ``(C, H, W)`` array -> ``(H, W, 3)`` on [0, 1] for ``imshow``.

    With ``mean``/``std`` (one per channel) the normalisation is undone; otherwise each image is
    min-max scaled (per-image normalisation cannot be undone).
    """
    array = np.asarray(image, dtype=np.float32)
    if mean is not None and std is not None and len(mean) == array.shape[0]:
        array = array * np.asarray(std, np.float32)[:, None, None]
        array = array + np.asarray(mean, np.float32)[:, None, None]
    else:
        low, high = float(array.min()), float(array.max())
        array = (array - low) / (high - low) if high > low else np.zeros_like(array)
    array = np.clip(array, 0.0, 1.0).transpose(1, 2, 0)
    return np.repeat(array, 3, axis=2) if array.shape[2] == 1 else array[..., :3]


def _draw_contour(ax: Axes, region: np.ndarray, color: str, width: float, style: str) -> None:
    if not region.any():
        return
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


def plot_overlay_grid(
    images: Sequence[np.ndarray | None],
    masks: Sequence[np.ndarray],
    preds: Sequence[np.ndarray],
    titles: Sequence[str],
    title: str,
    threshold: float | None = None,
    cols: int = 4,
) -> Figure:
    """Images with ground-truth (green) and predicted (dashed red) contours, one title each.

    Args:
        images: ``(H, W, 3)`` uint8 or [0, 1] float images; ``None`` draws on a dark canvas.
        masks: Ground-truth masks ``(H, W)`` (non-zero = lesion), the size of the image.
        preds: Predicted masks, the same size.
        titles: One line or more per tile (e.g. the image ID and its scores).
        title: Figure title.
        threshold: Shown in the legend when given.
        cols: Tiles per row at most.
    """
    count = len(masks)
    if not count == len(images) == len(preds) == len(titles):
        raise ValueError("images, masks, preds and titles must have the same length")
    cols = max(1, min(cols, count))
    rows = max(1, -(-count // cols))
    figure = Figure(figsize=(3.4 * cols, 3.6 * rows + 0.6), layout="constrained")
    for i, ax in enumerate(np.atleast_1d(figure.subplots(rows, cols, squeeze=False)).ravel()):
        ax.set_axis_off()
        if i >= count:
            continue
        mask, pred = np.asarray(masks[i]) > 0, np.asarray(preds[i]) > 0
        image = images[i]
        if image is None:
            ax.imshow(np.full((*mask.shape, 3), 0.15), interpolation="nearest")
        else:
            ax.imshow(image, interpolation="nearest")
        # Ground truth wide and solid, prediction dashed on top: both stay visible where they
        # coincide.
        _draw_contour(ax, mask, GROUND_TRUTH_COLOR, 3.0, "solid")
        _draw_contour(ax, pred, PREDICTION_COLOR, 1.5, "dashed")
        ax.set(xlim=(-0.5, mask.shape[1] - 0.5), ylim=(mask.shape[0] - 0.5, -0.5))
        ax.set_title(titles[i], fontsize=9)
    predicted = "prediction" if threshold is None else f"prediction (p >= {threshold:.2f})"
    handles = [
        Line2D([], [], color=GROUND_TRUTH_COLOR, lw=3, label="ground truth"),
        Line2D([], [], color=PREDICTION_COLOR, lw=1.5, ls="--", label=predicted),
    ]
    figure.legend(handles=handles, loc="outside lower center", ncols=2)
    figure.suptitle(title)
    return figure


def plot_jaccard_histogram(jaccards: Sequence[float], cutoff: float) -> Figure:
    """Histogram of per-image Jaccard in 0.05 bins, the mean and the ``cutoff`` marked."""
    values = np.asarray(list(jaccards), dtype=float)
    figure = Figure(figsize=(7.5, 4.5), layout="constrained")
    axes = figure.add_subplot()
    bins = np.linspace(0.0, 1.0, 21).tolist()
    if values.size:
        below = values < cutoff
        axes.hist(
            [values[below], values[~below]],
            bins=bins,
            stacked=True,
            color=["#d95f02", "#1b9e77"],
            edgecolor="white",
            label=[
                f"below {cutoff} ({below.sum()})",
                f"at or above {cutoff} ({(~below).sum()})",
            ],
        )
        mean = float(values.mean())
        thresholded = float(np.where(below, 0.0, values).mean())
        axes.axvline(mean, color="black", linewidth=1.5, label=f"mean Jaccard {mean:.3f}")
        axes.axvline(
            cutoff,
            color="grey",
            linestyle="--",
            linewidth=1.2,
            label=f"ISIC 2018 cutoff (thresholded Jaccard {thresholded:.3f})",
        )
        axes.legend(loc="best", fontsize=9, framealpha=0.9)
    axes.set_xlim(0.0, 1.0)
    axes.set_xticks(np.linspace(0.0, 1.0, 11))
    axes.set_xlabel("Jaccard index per image")
    axes.set_ylabel("images")
    axes.set_title(f"Per-image Jaccard ({values.size} images)")
    axes.grid(axis="y", alpha=0.3)
    axes.spines[["top", "right"]].set_visible(False)
    return figure
