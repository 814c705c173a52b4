"""TrainingPlotsCallback with a real Trainer and no logger: files and what they were drawn from."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from lightning.pytorch.callbacks import ModelCheckpoint

from skinet.training.callbacks.epoch_history import EpochMetricsHistory
from skinet.training.callbacks.plots import TrainingPlotsCallback

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


class RecordingPlots(TrainingPlotsCallback):
    """Keeps what the worst-image grid was built from (the drawing itself is not inspected)."""

    def _worst_images(self, trainer: Any, pl_module: Any, loader: Any, threshold: float) -> list:
        self.drawn = super()._worst_images(trainer, pl_module, loader, threshold)
        self.drawn_threshold = threshold
        self.drawn_weight = pl_module.net.weight.detach().clone()
        return self.drawn


@pytest.mark.parametrize("fixed_threshold", [None, 0.3])
def test_plots_are_written(
    tmp_path: Path,
    seg_model_cls: Any,
    loaders: Any,
    trainer_factory: Any,
    fixed_threshold: float | None,
) -> None:
    history = EpochMetricsHistory()
    callback = TrainingPlotsCallback(tmp_path / "plots", history, mean=(0.0,) * 3, std=(1.0,) * 3)
    trainer = trainer_factory([], [history, callback], max_epochs=3)
    model = seg_model_cls(fixed_threshold=fixed_threshold)
    trainer.fit(model, *loaders)

    assert sorted(p.name for p in (tmp_path / "plots").iterdir()) == [
        "dice_vs_threshold.png",
        "learning_curves.png",
        "val_predictions.png",
    ]
    for png in (tmp_path / "plots").iterdir():
        assert png.read_bytes()[:8] == PNG_MAGIC
    curves = history.curves()
    assert sorted(curves["train_loss"]) == [0, 1, 2]
    assert sorted(curves["val_dice"]) == [0, 1, 2]
    assert sorted(history.learning_rates) == [0, 1, 2]
    assert history.learning_rates[0] == pytest.approx(0.05)
    # No checkpoint: everything is about the last epoch.
    assert callback.reported_epoch == 2 and not callback.from_checkpoint
    result = history.sweeps[2]
    assert history.thresholds[2] == pytest.approx(float(result.optimal_threshold))
    expected_thresholds = 51 if fixed_threshold is None else 1
    assert result.thresholds.numel() == expected_thresholds
    if fixed_threshold is not None:
        assert history.thresholds[2] == pytest.approx(fixed_threshold)


def test_plots_report_the_best_checkpoint_and_its_worst_images(
    tmp_path: Path, seg_model_cls: Any, loaders: Any, trainer_factory: Any
) -> None:
    """A checkpoint monitoring the *lowest* validation Dice is saved at an early epoch: the
    threshold plot, the threshold and the weights of the grid must be that epoch's."""
    checkpoint = ModelCheckpoint(
        dirpath=tmp_path / "ckpt", monitor="val_best_dice_at_threshold", mode="min"
    )
    history = EpochMetricsHistory()
    callback = RecordingPlots(
        tmp_path / "plots", history, mean=(0.0,) * 3, std=(1.0,) * 3, num_images=3
    )
    trainer = trainer_factory([], [checkpoint, callback, history], max_epochs=4)
    trainer.fit(seg_model_cls(lr=0.2), *loaders)

    saved = torch.load(checkpoint.best_model_path, weights_only=True)
    dice = history.curves()["val_best_dice_at_threshold"]
    best_epoch = min(dice, key=lambda e: (dice[e], e))
    assert best_epoch < 3, "the test needs the best epoch to differ from the last"
    assert callback.from_checkpoint and callback.reported_epoch == saved["epoch"] == best_epoch
    assert callback.drawn_threshold == pytest.approx(history.thresholds[best_epoch])
    assert torch.equal(callback.drawn_weight, saved["state_dict"]["net.weight"])
    # The model is given back its final weights.
    assert not torch.equal(trainer.lightning_module.net.weight, saved["state_dict"]["net.weight"])

    # The grid holds the 3 lowest per-image Jaccards of all 8 validation images.
    model = trainer.lightning_module
    model.load_state_dict(saved["state_dict"])
    images, masks = map(torch.cat, zip(*loaders[1], strict=True))
    with torch.no_grad():
        preds = (torch.sigmoid(model(images)) >= callback.drawn_threshold).flatten(1)
    truth = masks.flatten(1) > 0.5
    union = (preds | truth).sum(1)
    jaccard = torch.where(union == 0, 1.0, (preds & truth).sum(1) / union.clamp_min(1))
    worst = sorted(range(8), key=lambda i: (float(jaccard[i]), i))[:3]
    assert [s.position for s in callback.drawn] == worst
    assert [s.jaccard for s in callback.drawn] == pytest.approx([float(jaccard[i]) for i in worst])
    assert (tmp_path / "plots" / "val_predictions.png").read_bytes()[:8] == PNG_MAGIC


def test_bad_arguments_are_rejected(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="mean and std"):
        TrainingPlotsCallback(tmp_path, EpochMetricsHistory(), mean=(0.5, 0.5, 0.5))
    with pytest.raises(ValueError, match="num_images"):
        TrainingPlotsCallback(tmp_path, EpochMetricsHistory(), num_images=0)


@pytest.mark.parametrize("kept_epoch", ["best epoch", "last epoch"])
def test_the_plots_name_the_epoch_the_run_keeps(
    tmp_path: Path, seg_model_cls: Any, loaders: Any, trainer_factory: Any, kept_epoch: str
) -> None:
    """Under ``select: last`` the marked epoch is the last one kept, not a best checkpoint."""
    checkpoint = ModelCheckpoint(dirpath=tmp_path / "ckpt", monitor="epoch", mode="max")
    history = EpochMetricsHistory()
    callback = TrainingPlotsCallback(
        tmp_path / "plots", history, mean=(0.0,) * 3, std=(1.0,) * 3, kept_epoch=kept_epoch
    )
    trainer = trainer_factory([], [checkpoint, callback, history], max_epochs=3)
    trainer.fit(seg_model_cls(), *loaders)

    assert callback.from_checkpoint and callback.reported_epoch == 2
    curves = callback.plot_learning_curves()
    assert curves is not None
    labels = {label for ax in curves.axes for label in ax.get_legend_handles_labels()[1]}
    assert f"{kept_epoch} kept (epoch 2, 0-based)" in labels
    assert not any("best checkpoint" in label for label in labels)
    threshold = callback.plot_threshold_curve()
    assert threshold is not None
    assert threshold.axes[0].get_title().endswith(f"(epoch 2, {kept_epoch} kept)")
