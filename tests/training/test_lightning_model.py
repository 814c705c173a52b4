"""LightningModel: metrics, thresholds, schedulers, non-finite detection, checkpoints."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from tests.helpers.trainer import bare_trainer

from skinet.config.experiment import parse_config
from skinet.training.lightning_model import LightningModel, _tensor_debug_summary
from skinet.training.optim import build_lr_scheduler, build_optimizer

METRIC_NAMES = ("loss", "dice", "iou")


def _model(tiny_raw: dict[str, Any], **train: Any) -> LightningModel:
    tiny_raw["TRAIN_CONFIG"].update(train)
    return LightningModel(parse_config(tiny_raw).to_yaml_dict())


class _Batches(torch.utils.data.IterableDataset):
    """A fixed list of ``(images, masks)`` batches, iterated as one DataLoader."""

    def __init__(self, batches: list[tuple[torch.Tensor, torch.Tensor]]) -> None:
        self.batches = batches

    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter(self.batches)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.batches[index]


def _raw_batches(n: int, size: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    gen = torch.Generator().manual_seed(0)
    out = []
    for _ in range(n):
        images = torch.randn(2, 3, size, size, generator=gen)
        masks = (torch.rand(2, 1, size, size, generator=gen) > 0.6).float()
        out.append((images, masks))
    return out


def _batches(n: int = 2, size: int = 32, batches=None) -> torch.utils.data.DataLoader:
    data = _Batches(batches if batches is not None else _raw_batches(n, size))
    return torch.utils.data.DataLoader(data, batch_size=None)


def test_sigmoid_only_in_probability_path(tiny_raw: dict[str, Any]) -> None:
    model = _model(tiny_raw)
    logits = model(torch.randn(1, 3, 32, 32))
    assert logits.min() < 0 or logits.max() > 1  # raw logits, not probabilities
    probs, preds = model._get_probs_and_preds(logits, 0.5)
    assert torch.equal(preds, (torch.sigmoid(logits) >= 0.5).long())
    assert probs.min() >= 0 and probs.max() <= 1


def test_fit_logs_every_guide_metric(tiny_raw: dict[str, Any]) -> None:
    model = _model(tiny_raw)
    trainer = bare_trainer(max_epochs=1)
    trainer.fit(model, _batches(), _batches())
    names = set(trainer.callback_metrics)
    for expected in (
        "train_loss",
        "train_dice",
        "train_iou",
        "val_loss",
        "val_dice",
        "val_iou",
        "val_best_dice_at_threshold",
        "val_mean_dice_per_image",
        "val_optimal_threshold",
        "val_dice_threshold_gain",
        "val_threshold_used",
    ):
        assert expected in names, expected
    optimal = float(trainer.callback_metrics["val_optimal_threshold"])
    trainer.test(model, _batches(), verbose=False)
    for expected in (
        "test_loss",
        "test_dice",
        "test_iou",
        "test_mean_dice_per_image",
        "test_mean_iou_per_image",
    ):
        assert expected in trainer.callback_metrics, expected
    # The sweep's threshold is used from the next epoch on, and for the test.
    assert model.threshold_used == pytest.approx(optimal)
    assert float(trainer.callback_metrics["test_threshold_used"]) == pytest.approx(optimal)
    result = model.val_threshold_result
    assert result is not None and result.dice_per_threshold.shape == (51,)
    assert float(result.optimal_threshold) == pytest.approx(optimal)
    assert result.thresholds.device.type == "cpu"


def test_epoch_metrics_cover_every_batch_of_the_epoch_only(tiny_raw: dict[str, Any]) -> None:
    model = _model(tiny_raw, optimal_threshold=0.5)
    val = _raw_batches(3, 32)
    trainer = bare_trainer(max_epochs=2)
    trainer.fit(model, _batches(), _batches(batches=val))
    metrics = {f"val_{k}": float(trainer.callback_metrics[f"val_{k}"]) for k in METRIC_NAMES}
    trainer.test(model, _batches(batches=val), verbose=False)
    metrics |= {f"test_{k}": float(trainer.callback_metrics[f"test_{k}"]) for k in METRIC_NAMES}
    # By hand over all three batches with the final weights (validation runs after the last
    # step; the second epoch's figures must not include the first epoch's updates).
    model.eval()
    tp = fp = fn = 0
    losses = []
    with torch.no_grad():
        for images, masks in val:
            logits = model(images)
            losses.append(float(model.loss_fn(logits, masks)))
            preds, truth = torch.sigmoid(logits) >= 0.5, masks.bool()
            tp += int((preds & truth).sum())
            fp += int((preds & ~truth).sum())
            fn += int((~preds & truth).sum())
    for stage in ("val", "test"):
        assert metrics[f"{stage}_dice"] == pytest.approx(2 * tp / (2 * tp + fp + fn))
        assert metrics[f"{stage}_iou"] == pytest.approx(tp / (tp + fp + fn))
        assert metrics[f"{stage}_loss"] == pytest.approx(sum(losses) / 3, rel=1e-5)


def test_fixed_threshold_is_echoed(tiny_raw: dict[str, Any]) -> None:
    model = _model(tiny_raw, optimal_threshold=0.3)
    trainer = bare_trainer(max_epochs=1)
    trainer.fit(model, _batches(), _batches())
    assert float(trainer.callback_metrics["val_optimal_threshold"]) == pytest.approx(0.3)
    assert float(trainer.callback_metrics["val_threshold_used"]) == pytest.approx(0.3)
    assert model.threshold_used == pytest.approx(0.3)


@pytest.mark.parametrize("tensor_name", ["image", "mask"])
def test_non_finite_input_raises_with_name_and_batch(
    tiny_raw: dict[str, Any], tensor_name: str
) -> None:
    model = _model(tiny_raw)
    raw = _raw_batches(3, 32)
    images, masks = raw[1]
    if tensor_name == "image":
        images[0, 0, 0, 0] = float("nan")
    else:
        masks[0, 0, 0, 0] = float("inf")
    with pytest.raises(ValueError, match=rf"train/{tensor_name} at batch 1: .*non_finite=1"):
        bare_trainer(max_epochs=1).fit(model, _batches(batches=raw), _batches())


def test_non_finite_loss_raises_with_name(tiny_raw: dict[str, Any]) -> None:
    model = _model(tiny_raw)

    class NaNLoss(torch.nn.Module):
        def forward(self, logits: torch.Tensor, masks: torch.Tensor) -> torch.Tensor:
            return logits.mean() * float("nan")

    model.loss_fn = NaNLoss()
    with pytest.raises(ValueError, match=r"train/loss at batch 0"):
        bare_trainer(max_epochs=1).fit(model, _batches(), _batches())


def test_tensor_debug_summary_reports_statistics() -> None:
    summary = _tensor_debug_summary(torch.tensor([1.0, 3.0, float("nan"), float("inf")]))
    assert "min=1" in summary and "max=3" in summary and "mean=2" in summary
    assert "non_finite=2" in summary and "nan=1" in summary and "inf=1" in summary


@pytest.mark.parametrize(
    ("train", "expected"),
    [
        ({"use_lr_scheduler": False}, None),
        ({"scheduler_type": "reduce_on_plateau"}, torch.optim.lr_scheduler.ReduceLROnPlateau),
        (
            {"scheduler_type": "cosine_annealing", "max_epochs": 7},
            torch.optim.lr_scheduler.CosineAnnealingLR,
        ),
    ],
)
def test_scheduler_choices(
    tiny_raw: dict[str, Any], train: dict[str, Any], expected: type | None
) -> None:
    tiny_raw["TRAIN_CONFIG"].update(train)
    cfg = parse_config(tiny_raw)
    optimizer = build_optimizer([torch.nn.Parameter(torch.zeros(1))], cfg.train)
    assert isinstance(optimizer, torch.optim.AdamW)
    scheduler = build_lr_scheduler(optimizer, cfg.train)
    if expected is None:
        assert scheduler is None
        return
    assert scheduler is not None and isinstance(scheduler["scheduler"], expected)
    if expected is torch.optim.lr_scheduler.ReduceLROnPlateau:
        assert scheduler["monitor"] == "val_best_dice_at_threshold"
        assert scheduler["scheduler"].mode == "max"
        assert scheduler["scheduler"].patience == cfg.train.lr_scheduler_config.patience
    else:
        assert scheduler["scheduler"].T_max == 7
        assert scheduler["scheduler"].eta_min == 1e-6


def test_adam_optimizer(tiny_raw: dict[str, Any]) -> None:
    tiny_raw["TRAIN_CONFIG"].update({"optimizer_name": "adam", "lr": 0.01, "weight_decay": 0.5})
    cfg = parse_config(tiny_raw)
    optimizer = build_optimizer([torch.nn.Parameter(torch.zeros(1))], cfg.train)
    assert type(optimizer) is torch.optim.Adam
    assert optimizer.defaults["lr"] == 0.01 and optimizer.defaults["weight_decay"] == 0.5


def test_compiled_checkpoint_loads_into_uncompiled_model(
    tiny_raw: dict[str, Any], tmp_path
) -> None:
    # One memory format on both sides, so that the outputs are equal to the bit.
    compiled = _model(
        tiny_raw, use_torch_compile=True, torch_compile_backend="eager", channels_last=False
    )
    trainer = bare_trainer(max_epochs=1, default_root_dir=tmp_path)
    trainer.fit(compiled, _batches(), _batches())
    path = tmp_path / "compiled.ckpt"
    trainer.save_checkpoint(path)
    assert any("_orig_mod." in k for k in torch.load(path, weights_only=False)["state_dict"])
    tiny_raw["TRAIN_CONFIG"]["use_torch_compile"] = False
    plain = LightningModel.load_from_checkpoint(path, config=parse_config(tiny_raw).to_yaml_dict())
    images = torch.randn(2, 3, 32, 32)
    compiled.eval()
    plain.eval()
    with torch.no_grad():
        assert torch.equal(compiled(images), plain(images))
    assert plain.threshold_used == compiled.threshold_used
