"""The pure plotting functions: arrays in, figures out, and no Lightning behind them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from skinet.evaluation.figures import (
    plot_learning_curves,
    plot_overlay_grid,
    plot_threshold_curve,
    save_figure,
    to_display_image,
)
from skinet.metrics.thresholds import find_best_threshold


@pytest.mark.process
def test_plotting_and_evaluation_import_no_lightning() -> None:
    code = (
        "import sys, skinet.evaluation.figures, skinet.evaluation.evaluate; "
        "import skinet.metrics.thresholds; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('lightning', 'mlflow')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_figures_from_arrays(tmp_path: Path) -> None:
    history = {"train_loss": {0: 1.0, 1: 0.5}, "val_loss": {0: 1.2, 1: 0.7}}
    curves = plot_learning_curves(history, best_epoch=1, learning_rates={0: 1e-3, 1: 1e-5})
    assert curves is not None and len(curves.axes) == 4
    assert curves.axes[3].get_yscale() == "log"
    # The epochs as Lightning counts them in the checkpoint names, and said so.
    assert curves.axes[0].get_xlabel() == "epoch (0-based, as in best-epoch=NNN.ckpt)"
    assert plot_learning_curves({}) is None
    assert not [line for line in curves.axes[0].lines if line.get_linestyle() == ":"]

    # Progressive resizing: a dotted line where the training images grow, in every panel.
    history["train_image_size"] = {0: 24.0, 1: 24.0, 2: 32.0, 3: 32.0}
    resized = plot_learning_curves(history, best_epoch=3, learning_rates={0: 1e-3, 1: 1e-5})
    assert resized is not None
    for ax in resized.axes:
        dotted = [line for line in ax.lines if line.get_linestyle() == ":"]
        assert [(line.get_xdata()[0], line.get_label()) for line in dotted] == [
            (2, "training at 32 px from epoch 2 (0-based)")
        ]

    probs = torch.rand(2, 1, 8, 8, generator=torch.Generator().manual_seed(0))
    sweep = plot_threshold_curve(find_best_threshold(probs, probs > 0.5), "sweep")
    fixed = find_best_threshold(probs, probs > 0.5, torch.tensor([0.3]))
    legend = plot_threshold_curve(fixed, "fixed").axes[0].get_legend()
    assert "fixed threshold 0.30" in [text.get_text() for text in legend.get_texts()]

    image = to_display_image(np.zeros((3, 8, 8)), mean=(0.5,) * 3, std=(0.25,) * 3)
    assert image.shape == (8, 8, 3) and float(image.max()) == 0.5
    mask = np.zeros((8, 8), np.uint8)
    mask[2:6, 2:6] = 1
    grid = plot_overlay_grid([image, None], [mask, mask], [mask, 0 * mask], ["a", "b"], "grid")
    for name, figure in (("sweep", sweep), ("grid", grid)):
        assert save_figure(figure, tmp_path / f"{name}.png").stat().st_size > 0


def test_overlay_grid_rejects_unequal_lengths() -> None:
    mask = np.zeros((4, 4))
    with pytest.raises(ValueError, match="same length"):
        plot_overlay_grid([None], [mask, mask], [mask, mask], ["a", "b"], "grid")
