"""TrainingPlotsCallback with a real Trainer and no logger: files only."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from skinet.callbacks import TrainingPlotsCallback

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("fixed_threshold", [None, 0.3])
def test_plots_are_written(
    tmp_path: Path,
    seg_model_cls: Any,
    loaders: Any,
    trainer_factory: Any,
    fixed_threshold: float | None,
) -> None:
    callback = TrainingPlotsCallback(tmp_path / "plots", mean=(0.0,) * 3, std=(1.0,) * 3)
    trainer = trainer_factory([], [callback], max_epochs=3)
    model = seg_model_cls(fixed_threshold=fixed_threshold)
    trainer.fit(model, *loaders)

    assert sorted(p.name for p in (tmp_path / "plots").iterdir()) == [
        "dice_vs_threshold.png",
        "learning_curves.png",
        "val_predictions.png",
    ]
    for png in (tmp_path / "plots").iterdir():
        assert png.read_bytes()[:8] == PNG_MAGIC
    assert sorted(callback.history["train_loss"]) == [0, 1, 2]
    assert sorted(callback.history["val_dice"]) == [0, 1, 2]
    if fixed_threshold is None:
        assert callback.threshold_curve is not None
        assert callback.threshold_used == callback.threshold_curve["optimal_threshold"]
    else:
        assert callback.threshold_curve is None
        assert callback.threshold_used == fixed_threshold


def test_mean_without_std_is_rejected(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="mean and std"):
        TrainingPlotsCallback(tmp_path, mean=(0.5, 0.5, 0.5))
