"""``DATA_CONFIG.progressive_resizing``: the first part of a run trains on smaller images,
through a real Trainer and ``run_training`` (tiny CPU runs)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml
from tests.helpers.trainer import bare_trainer
from torch.utils.data import DataLoader, TensorDataset

from skinet.config.errors import ConfigError
from skinet.config.experiment import parse_config
from skinet.keys import MetricsKey
from skinet.models.unet2d import UNet2D
from skinet.training.callbacks.resizing import ProgressiveResizing, scale_batch
from skinet.training.lightning_model import LightningModel
from skinet.training.run import run_training


@pytest.fixture
def unet_inputs() -> Iterator[list[tuple[bool, tuple[int, ...]]]]:
    """``(training, (H, W))`` of every UNet2D forward while the test runs (a global hook)."""
    seen: list[tuple[bool, tuple[int, ...]]] = []

    def record(module: torch.nn.Module, args: tuple[Any, ...]) -> None:
        if isinstance(module, UNet2D):
            seen.append((module.training, tuple(args[0].shape[-2:])))

    handle = torch.nn.modules.module.register_module_forward_pre_hook(record)
    yield seen
    handle.remove()


def _sizes(raw_history: list[Any]) -> list[float]:
    return [m.value for m in sorted(raw_history, key=lambda m: m.step)]


def test_a_batch_is_scaled_with_its_masks_kept_binary() -> None:
    # A one-pixel checkerboard: sampled without antialiasing it would stay 0 and 1.
    images = ((torch.arange(8)[:, None] + torch.arange(8)) % 2).float().expand(2, 3, 8, 8)
    masks = torch.zeros(2, 1, 8, 8)
    masks[:, :, :4, :4] = 1  # the top-left quarter
    masks[:, :, 4, 4] = 1  # a quarter of one small pixel: not kept
    small, small_masks = scale_batch(images, masks, 4)
    expected = torch.zeros(2, 1, 4, 4)
    expected[:, :, :2, :2] = 1
    assert small.shape == (2, 3, 4, 4) and torch.equal(small_masks, expected)
    assert torch.allclose(small[..., 1:-1, 1:-1], torch.full((2, 3, 2, 2), 0.5), atol=0.01)


def test_three_quarters_keeps_a_half_plane_and_a_constant_image() -> None:
    images = torch.full((1, 3, 8, 8), 0.3)
    masks = torch.zeros(1, 1, 8, 8)
    masks[:, :, :4] = 1  # the top half
    small, small_masks = scale_batch(images, masks, 6)
    assert torch.allclose(small, torch.full((1, 3, 6, 6), 0.3))
    assert small_masks[0, 0, :, 0].tolist() == [1, 1, 1, 0, 0, 0]
    assert set(small_masks.unique().tolist()) == {0.0, 1.0}


@pytest.mark.parametrize(
    ("resizing", "model", "said"),
    [
        ({"scale": 0.1}, {}, r"scale 0.1 makes the first epochs' images 3 px.*between 4 and 31"),
        ({"scale": 0.13}, {"norm": "instance"}, r"4 px.*between 5 and 31.*norm 'instance'"),
        ({"scale": 0.99}, {}, r"scale 0.99 makes.* 32 px of image_size 32"),
        ({"scale": 0.55}, {"deep_supervision": 1}, r"18 px.*a multiple of 4.*at least 0.125"),
        ({"scale": 0.0}, {}, r"progressive_resizing.scale"),
        ({"fraction": 1.0}, {}, r"progressive_resizing.fraction"),
    ],
)
def test_a_resizing_the_model_cannot_train_is_a_config_error(
    tiny_raw: dict[str, Any], resizing: dict[str, Any], model: dict[str, Any], said: str
) -> None:
    tiny_raw["DATA_CONFIG"]["progressive_resizing"] = resizing
    tiny_raw["MODEL_CONFIG"].update(model)
    with pytest.raises(ConfigError, match=said):
        parse_config(tiny_raw)


def test_the_scale_follows_the_image_size(tiny_raw: dict[str, Any]) -> None:
    tiny_raw["DATA_CONFIG"]["progressive_resizing"] = {}
    resizing = parse_config(tiny_raw).data.progressive_resizing
    assert resizing is not None and (resizing.scale, resizing.fraction) == (0.75, 0.5)
    assert (resizing.side(128), resizing.side(32)) == (96, 24)


@pytest.mark.parametrize(
    ("max_time", "model"),
    [
        (None, {}),
        ("00:01:00:00", {}),  # an hour: the epochs end the run first, so they count
        (None, {"deep_supervision": 1}),
    ],
)
def test_the_first_epochs_train_small_and_validation_stays_full(
    tiny_raw: dict[str, Any],
    max_time: str | None,
    model: dict[str, Any],
    unet_inputs: list[tuple[bool, tuple[int, ...]]],
    caplog: pytest.LogCaptureFixture,
) -> None:
    tiny_raw["MODEL_CONFIG"].update(model)
    tiny_raw["DATA_CONFIG"]["progressive_resizing"] = {"scale": 0.5, "fraction": 0.5}
    module = LightningModel(parse_config(tiny_raw).to_yaml_dict())
    epochs: list[int] = []
    module.model.register_forward_pre_hook(lambda *_: epochs.append(module.current_epoch))
    images = torch.rand(8, 3, 32, 32)
    masks = (torch.rand(8, 1, 32, 32) > 0.5).float()
    loader = DataLoader(TensorDataset(images, masks), batch_size=4)
    trainer = bare_trainer(
        max_epochs=4, max_time=max_time, callbacks=[ProgressiveResizing(16, 32, 0.5)]
    )
    with caplog.at_level(logging.INFO, logger="skinet.training.callbacks.resizing"):
        trainer.fit(module, loader, loader)

    trained = {
        (e, size) for e, (training, size) in zip(epochs, unet_inputs, strict=True) if training
    }
    assert trained == {(0, (16, 16)), (1, (16, 16)), (2, (32, 32)), (3, (32, 32))}
    assert {size for training, size in unet_inputs if not training} == {(32, 32)}
    said = [
        r.getMessage() for r in caplog.records if r.name == "skinet.training.callbacks.resizing"
    ]
    assert said == [
        "training on 16 px images from epoch 1 (DATA_CONFIG.progressive_resizing: "
        "the first 50% of the run)",
        "training on 32 px images from epoch 3",
    ]


@pytest.mark.parametrize("augment_on", ["cpu", "device"])
def test_a_budgeted_run_trains_small_first_then_full_and_says_so(
    tiny_raw: dict[str, Any], augment_on: str, unet_inputs: list[tuple[bool, tuple[int, ...]]]
) -> None:
    from mlflow.tracking import MlflowClient

    from skinet.tracking.mlflow_utils import resolve_tracking_uri

    tiny_raw["TRAIN_CONFIG"].update(
        max_epochs=10_000, max_time={"seconds": 6}, use_early_stopping=False, augment_on=augment_on
    )
    tiny_raw["DATA_CONFIG"]["progressive_resizing"] = {"scale": 0.5, "fraction": 0.4}
    cfg = parse_config(tiny_raw)
    result = run_training(cfg, visualize=False)
    assert result.stopped_by == "max_time"

    client = MlflowClient(resolve_tracking_uri(cfg))
    sizes = _sizes(client.get_metric_history(result.mlflow_run_id, MetricsKey.TRAIN_IMAGE_SIZE))
    assert len(sizes) == result.epochs_trained
    switch = sizes.index(32.0)
    assert switch > 0 and sizes[:switch] == [16.0] * switch and set(sizes[switch:]) == {32.0}
    trained = [size for training, size in unet_inputs if training]
    first_full = trained.index((32, 32))
    assert first_full > 0 and set(trained[:first_full]) == {(16, 16)}
    assert set(trained[first_full:]) == {(32, 32)}
    assert {size for training, size in unet_inputs if not training} == {(32, 32)}
    card = (result.run_dir / "MODEL_CARD.md").read_text()
    assert "The first 40% of the run trained on 16x16 images scaled down from 32x32" in card


def test_a_resume_with_more_epochs_never_goes_back_to_small_images(
    tiny_raw: dict[str, Any],
) -> None:
    from mlflow.tracking import MlflowClient

    from skinet.tracking.mlflow_utils import resolve_tracking_uri

    tiny_raw["TRAIN_CONFIG"].update(max_epochs=2, use_early_stopping=False)
    tiny_raw["DATA_CONFIG"]["progressive_resizing"] = {"scale": 0.5, "fraction": 0.5}
    first = run_training(parse_config(tiny_raw), visualize=False)
    # Epoch 2 of 6 is a third of the run: without the switch kept, it would train small again.
    tiny_raw["TRAIN_CONFIG"]["max_epochs"] = 6
    cfg = parse_config(tiny_raw)
    resumed = run_training(cfg, visualize=False, resume="last")
    assert resumed.mlflow_run_id == first.mlflow_run_id
    history = MlflowClient(resolve_tracking_uri(cfg)).get_metric_history(
        resumed.mlflow_run_id, MetricsKey.TRAIN_IMAGE_SIZE
    )
    assert _sizes(history) == [16.0, 32.0, 32.0, 32.0, 32.0, 32.0]


def test_fine_tuning_does_not_take_the_sources_resizing(
    tiny_raw: dict[str, Any], tmp_path: Path
) -> None:
    from skinet.cli.main import main

    tiny_raw["TRAIN_CONFIG"].update(max_epochs=1, use_mlflow_logger=False)
    tiny_raw["DATA_CONFIG"]["progressive_resizing"] = {"scale": 0.5}
    source = run_training(parse_config(tiny_raw), visualize=False).best_checkpoint
    assert source is not None
    del tiny_raw["DATA_CONFIG"]["progressive_resizing"]
    tiny_raw["TRAIN_CONFIG"].update(experiment_name="clinic", init_checkpoint=str(source))
    config = tmp_path / "clinic.yaml"
    config.write_text(yaml.safe_dump(tiny_raw))
    assert main(["train", "--config", str(config), "--no-visualize"]) == 0
    (run_dir,) = (tmp_path / "runs").glob("clinic_*")
    saved = yaml.safe_load((run_dir / "config.yaml").read_text())
    assert saved["DATA_CONFIG"]["progressive_resizing"] is None
    assert "images scaled down from" not in (run_dir / "MODEL_CARD.md").read_text()
