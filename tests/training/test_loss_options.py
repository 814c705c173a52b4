"""The loss options: ``MODEL_CONFIG.deep_supervision`` (coarser decoder maps trained through
their own heads, which prediction and export never carry) and ``TRAIN_CONFIG.bce_weight``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
import yaml
from tests.helpers.config import tiny_raw_config
from tests.helpers.inference import run_cli, write_rgb

from skinet.checkpoints.read import build_model, load_checkpoint
from skinet.config.experiment import parse_config
from skinet.metrics.losses import BCEDiceLoss, DeepSupervisionLoss, deep_supervision_weights
from skinet.models.unet2d import UNet2D
from skinet.training.lightning_model import LightningModel


def _deep_raw(tmp_path: Path, synthetic_root: Path, levels: int = 1) -> dict[str, Any]:
    raw = tiny_raw_config(tmp_path, synthetic_root)
    raw["TRAIN_CONFIG"].update(max_epochs=1, use_mlflow_logger=False)
    raw["MODEL_CONFIG"].update(norm="instance", deep_supervision=levels)
    return raw


@pytest.fixture(scope="module")
def deep_checkpoint(tmp_path_factory: pytest.TempPathFactory, synthetic_root: Path) -> Path:
    """The tiny model (3 levels) with one auxiliary head, trained one epoch by ``skinet train``."""
    tmp = tmp_path_factory.mktemp("deep")
    config = tmp / "deep.yaml"
    config.write_text(yaml.safe_dump(_deep_raw(tmp, synthetic_root)))
    assert run_cli(["train", "--config", str(config), "--no-visualize"]) == 0
    (checkpoint,) = (tmp / "runs").glob("*/checkpoints/best*.ckpt")
    return checkpoint


def test_the_heads_see_the_coarser_decoder_maps_and_plain_forward_skips_them() -> None:
    model = UNet2D(out_channels_layer1=8, number_of_layers=4, deep_supervision=2).eval()
    images = torch.randn(2, 3, 64, 48)
    outputs = model(images, deep=True)
    assert [tuple(o.shape) for o in outputs] == [(2, 1, 64, 48), (2, 1, 32, 24), (2, 1, 16, 12)]
    torch.testing.assert_close(model(images), outputs[0])
    # A size that needs padding would leave coarse cells half padding: refused.
    assert tuple(model(torch.randn(1, 3, 50, 70)).shape) == (1, 1, 50, 70)
    with pytest.raises(ValueError, match=r"multiples of 8 .*got 50x70"):
        model(torch.randn(1, 3, 50, 70), deep=True)
    plain = UNet2D(out_channels_layer1=8, number_of_layers=4)
    assert not any("aux_heads" in name for name in plain.state_dict())
    with pytest.raises(ValueError, match="deep_supervision=3 exceeds the 2 decoder maps"):
        UNet2D(number_of_layers=4, deep_supervision=3)


def test_the_loss_weights_halve_per_level_and_the_first_term_is_the_plain_loss() -> None:
    assert deep_supervision_weights(2) == pytest.approx([4 / 7, 2 / 7, 1 / 7])
    assert deep_supervision_weights(0) == [1.0]
    gen = torch.Generator().manual_seed(0)
    masks = torch.zeros(2, 1, 8, 8)
    masks[:, :, :4, :4] = 1.0  # a lesion on whole 2x2 cells: its coarse target is 1 there
    outputs = [torch.randn(2, 1, 8, 8, generator=gen), torch.full((2, 1, 4, 4), -30.0)]
    outputs[1][:, :, :2, :2] = 30.0
    loss = DeepSupervisionLoss(BCEDiceLoss(), levels=1)
    terms = loss.terms(outputs, masks)
    torch.testing.assert_close(terms[0], BCEDiceLoss()(outputs[0], masks))
    assert terms[1].item() < 1e-6  # the coarse map matches the area-averaged mask exactly
    torch.testing.assert_close(loss(outputs, masks), 2 / 3 * terms[0] + 1 / 3 * terms[1])
    with pytest.raises(ValueError, match="expects 2 outputs"):
        loss.terms(outputs[:1], masks)


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "torch_compile"])
def test_a_training_step_trains_the_heads_and_logs_the_full_resolution_loss(
    tmp_path: Path, synthetic_root: Path, compiled: bool
) -> None:
    raw = _deep_raw(tmp_path, synthetic_root)
    raw["TRAIN_CONFIG"].update(use_torch_compile=compiled, torch_compile_backend="eager")
    model = LightningModel(parse_config(raw).to_yaml_dict())
    gen = torch.Generator().manual_seed(0)
    images = torch.randn(2, 3, 32, 32, generator=gen)
    masks = (torch.rand(2, 1, 32, 32, generator=gen) > 0.6).float()
    out = model._shared_step((images, masks), 0, "train")
    out["loss"].backward()
    heads = getattr(model.model, "_orig_mod", model.model).aux_heads
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in heads.parameters())
    logged = model.train_loss.compute()
    with torch.no_grad():
        plain = model.loss_fn(model(images), masks)
    torch.testing.assert_close(logged, plain)  # train_loss compares with val_loss
    assert not torch.isclose(out["loss"].detach(), plain)  # what is trained also has the heads


def test_a_deep_checkpoint_predicts_and_exports_without_its_heads(
    deep_checkpoint: Path, tmp_path: Path
) -> None:
    checkpoint = load_checkpoint(deep_checkpoint)
    assert checkpoint.config.model.deep_supervision == 1
    assert any(key.startswith("aux_heads.") for key in checkpoint.state_dict)
    model = build_model(checkpoint)
    assert not any("aux_heads" in name for name in model.state_dict())
    images = tmp_path / "images"
    images.mkdir()
    write_rgb(images / "a.png", 40, 56)
    argv = ["predict", "--checkpoint", str(deep_checkpoint), "--input", str(images)]
    assert run_cli([*argv, "--output", str(tmp_path / "masks"), "--device", "cpu"]) == 0
    assert (tmp_path / "masks" / "a_mask.png").is_file()
    exported = tmp_path / "model.pt"
    argv = ["export", "--checkpoint", str(deep_checkpoint), "--format", "torchscript"]
    assert run_cli([*argv, "--output", str(exported)]) == 0
    module = torch.jit.load(str(exported))
    assert not any("aux_heads" in name for name, _ in module.named_parameters())


def test_fine_tuning_keeps_or_drops_the_sources_heads(
    deep_checkpoint: Path, tmp_path: Path, synthetic_root: Path
) -> None:
    raw = tiny_raw_config(tmp_path, synthetic_root)
    del raw["MODEL_CONFIG"]
    # An lr so small that one epoch leaves the weights as loaded.
    raw["TRAIN_CONFIG"].update(max_epochs=1, use_mlflow_logger=False, lr=1e-12)
    config = tmp_path / "clinic.yaml"
    config.write_text(yaml.safe_dump(raw))
    argv = ["train", "--config", str(config), "--init-from", str(deep_checkpoint), "--no-visualize"]
    source = load_checkpoint(deep_checkpoint).state_dict
    # The source's heads load into a model that has them (the source's deep_supervision) ...
    assert run_cli([*argv, "--set", "TRAIN_CONFIG.experiment_name=kept"]) == 0
    (run,) = (tmp_path / "runs").glob("*kept*/checkpoints/best*.ckpt")
    kept = load_checkpoint(run)
    assert kept.config.model.deep_supervision == 1
    torch.testing.assert_close(kept.state_dict["aux_heads.0.weight"], source["aux_heads.0.weight"])
    # ... and are dropped from a model that has none.
    dropped = [
        "--set",
        "MODEL_CONFIG.deep_supervision=0",
        "--set",
        "TRAIN_CONFIG.experiment_name=none",
    ]
    assert run_cli([*argv, *dropped]) == 0
    (run,) = (tmp_path / "runs").glob("*none*/checkpoints/best*.ckpt")
    assert load_checkpoint(run).config.model.deep_supervision == 0
    assert not any(key.startswith("aux_heads.") for key in load_checkpoint(run).state_dict)


def test_more_heads_than_decoder_maps_or_a_padded_size_is_a_usage_error(
    tmp_path: Path, synthetic_root: Path, caplog: pytest.LogCaptureFixture
) -> None:
    config = tmp_path / "deep.yaml"
    config.write_text(yaml.safe_dump(_deep_raw(tmp_path, synthetic_root, levels=2)))
    assert run_cli(["train", "--config", str(config)]) == 2
    assert "MODEL_CONFIG.deep_supervision: 2 is more than the 1 decoder maps" in caplog.text
    assert "(use 0 to 1)" in caplog.text
    caplog.clear()
    raw = _deep_raw(tmp_path, synthetic_root)
    raw["DATA_CONFIG"]["image_size"] = 30
    config.write_text(yaml.safe_dump(raw))
    assert run_cli(["train", "--config", str(config)]) == 2
    assert "image_size that is a multiple of 4" in caplog.text and "image_size: 28" in caplog.text
    assert not (tmp_path / "runs").exists()


def test_the_configured_bce_weight_is_the_trained_loss_and_needs_bce_dice(
    tmp_path: Path, synthetic_root: Path, caplog: pytest.LogCaptureFixture
) -> None:
    raw = _deep_raw(tmp_path, synthetic_root)
    raw["TRAIN_CONFIG"]["bce_weight"] = 0.25
    model = LightningModel(parse_config(raw).to_yaml_dict())
    assert model.loss_fn.bce_weight == 0.25 and model.deep_loss.loss is model.loss_fn
    raw["TRAIN_CONFIG"]["loss_name"] = "DICE"
    config = tmp_path / "dice.yaml"
    config.write_text(yaml.safe_dump(raw))
    assert run_cli(["train", "--config", str(config)]) == 2
    assert "bce_weight: 0.25 weighs the terms of loss_name: BCE_DICE" in caplog.text


def test_the_configured_dice_reduction_is_the_trained_loss_and_needs_a_dice_term(
    tmp_path: Path, synthetic_root: Path, caplog: pytest.LogCaptureFixture
) -> None:
    raw = _deep_raw(tmp_path, synthetic_root)
    raw["TRAIN_CONFIG"]["dice_reduction"] = "image"
    model = LightningModel(parse_config(raw).to_yaml_dict())
    assert model.loss_fn.dice.reduction == "image" and model.deep_loss.loss is model.loss_fn
    raw["TRAIN_CONFIG"]["loss_name"] = "BCE"
    config = tmp_path / "bce.yaml"
    config.write_text(yaml.safe_dump(raw))
    assert run_cli(["train", "--config", str(config)]) == 2
    assert "dice_reduction: image reduces the soft Dice term" in caplog.text
    assert not (tmp_path / "runs").exists()
