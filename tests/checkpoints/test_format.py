"""The checkpoint payload: one format for writer and readers; old checkpoints predict as trained."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from tests.helpers.config import tiny_raw_config
from tests.helpers.inference import write_rgb

from skinet.checkpoints.format import (
    CHECKPOINT_KEY,
    FORMAT_VERSION,
    CheckpointError,
    CheckpointPayload,
)
from skinet.checkpoints.read import load_checkpoint
from skinet.config.experiment import parse_config
from skinet.inference.export import export_checkpoint, run_exported
from skinet.inference.predictor import Predictor
from skinet.models.unet2d import UNet2D

GATE = {"merge_residual_mode": "attention_gate"}


def test_payload_round_trips_through_plain_data() -> None:
    payload = CheckpointPayload({"MODEL_CONFIG": GATE}, 0.4, 0.45, "run-1")
    raw = payload.to_dict()
    assert raw == {
        "config": {"MODEL_CONFIG": GATE},
        "val_optimal_threshold": 0.4,
        "threshold_used": 0.45,
        "mlflow_run_id": "run-1",
        "format_version": FORMAT_VERSION,
    }
    assert CheckpointPayload.from_dict(raw) == payload
    assert payload.threshold == 0.4
    assert CheckpointPayload({}, None, 0.45).threshold == 0.45
    assert CheckpointPayload({}).threshold == 0.5


def test_a_calibrated_payload_keeps_its_threshold_and_it_wins() -> None:
    calibration = {"threshold": 0.7, "tuned_on": "clinic/images", "num_images": 20}
    payload = CheckpointPayload({"MODEL_CONFIG": GATE}, 0.4, 0.45, calibration=calibration)
    raw = payload.to_dict()
    assert raw["format_version"] == FORMAT_VERSION
    read = CheckpointPayload.from_dict(raw)
    assert read.calibration == calibration and read.threshold == 0.7
    with pytest.raises(CheckpointError, match="calibration"):
        CheckpointPayload.from_dict({**raw, "calibration": {"threshold": 1.5}})


@pytest.mark.parametrize(
    ("train", "origin"),
    [
        ({}, "the checkpoint's validation-optimal one"),
        ({"threshold_selection": "pooled_dice"}, "the checkpoint's validation-optimal one"),
        (
            {"threshold_selection": "per_image"},
            "the checkpoint's validation-optimal one by mean per-image Jaccard",
        ),
        (
            {"threshold_selection": "guarded", "threshold_reference": 0.4},
            "the checkpoint's validation sweep kept its threshold_reference: guarded, no clear "
            "gain on its validation images",
        ),
        (
            {"threshold_selection": "guarded", "threshold_reference": 0.55},
            "the checkpoint's validation-optimal one by mean per-image Jaccard: guarded, a clear "
            "gain over its threshold_reference 0.550",
        ),
    ],
)
def test_a_swept_threshold_says_by_which_rule_and_whether_a_guard_kept_it(
    train: dict[str, Any], origin: str
) -> None:
    payload = CheckpointPayload({"TRAIN_CONFIG": train}, 0.4, 0.4)
    assert payload.threshold_choice.origin == origin
    assert payload.threshold_choice.to_dict().get("reference") == train.get("threshold_reference")


@pytest.mark.parametrize(
    ("model", "upsample"),
    [
        (GATE, "bilinear"),  # trained with the bilinear gate: read as such
        ({**GATE, "attention_upsample": "nearest"}, "nearest"),  # spelled out: kept
        ({"merge_residual_mode": "he2"}, None),  # no gate: nothing changes
    ],
)
def test_format_1_payload_is_read_as_trained(model: dict[str, Any], upsample: str | None) -> None:
    legacy = {"config": {"MODEL_CONFIG": model}, "val_optimal_threshold": 0.3}
    payload = CheckpointPayload.from_dict(legacy)
    assert payload.format_version == 1
    assert payload.config["MODEL_CONFIG"].get("attention_upsample") == upsample
    assert legacy["config"]["MODEL_CONFIG"] is model  # the input is left as it was
    assert model.get("attention_upsample") in (None, "nearest")
    # A format-2 payload is taken as written: its default gate is nearest.
    current = CheckpointPayload.from_dict({**legacy, "format_version": 2})
    assert current.config == legacy["config"]


@pytest.mark.parametrize(
    ("checkpoint", "message"),
    [
        ({"state_dict": {}}, "not a SkiNet checkpoint"),
        ({CHECKPOINT_KEY: {"threshold_used": 0.5}}, "has no 'config' mapping"),
        (
            {CHECKPOINT_KEY: {"config": {}, "format_version": FORMAT_VERSION + 1}},
            f"format {FORMAT_VERSION + 1}.*upgrade skinet",
        ),
        ({CHECKPOINT_KEY: {"config": {}, "format_version": "2"}}, "'format_version'"),
        ({CHECKPOINT_KEY: {"config": {}, "threshold_used": "high"}}, r"\['threshold_used'\]"),
        ({CHECKPOINT_KEY: {"config": {}, "mlflow_run_id": 7}}, r"\['mlflow_run_id'\] must be str"),
    ],
)
def test_bad_payloads_are_refused_by_name(checkpoint: dict[str, Any], message: str) -> None:
    with pytest.raises(CheckpointError, match=message):
        CheckpointPayload.from_checkpoint(checkpoint, "x.ckpt")


@pytest.mark.process
def test_module_imports_neither_lightning_nor_torch() -> None:
    code = (
        "import sys, skinet.checkpoints.format\n"
        "assert not {'lightning', 'torch', 'mlflow'} & set(sys.modules), sorted(sys.modules)"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


@pytest.fixture(scope="module")
def bilinear_gate_run(
    tmp_path_factory: pytest.TempPathFactory, synthetic_root: Path
) -> tuple[dict[str, Any], Path]:
    """A tiny attention-gate model trained for an epoch with the bilinear gate (format 2)."""
    from skinet.training.run import run_training

    tmp = tmp_path_factory.mktemp("bilinear_gate")
    raw = tiny_raw_config(tmp, synthetic_root)
    raw["TRAIN_CONFIG"].update(max_epochs=1, use_mlflow_logger=False, use_early_stopping=False)
    raw["MODEL_CONFIG"].update(GATE, attention_upsample="bilinear")
    result = run_training(parse_config(raw), visualize=False)
    assert result.best_checkpoint is not None
    return raw, result.best_checkpoint


def write_format_1(source: Path, target: Path) -> Path:
    """``source`` rewritten as SkiNet wrote checkpoints before format 2.

    No ``format_version``, and a config without the fields added since (``norm``,
    ``norm_groups``, ``attention_upsample``), in the payload and in Lightning's hyperparameters.
    """
    checkpoint = torch.load(source, map_location="cpu", weights_only=True)
    payload = checkpoint[CHECKPOINT_KEY]
    del payload["format_version"]
    for config in (payload["config"], checkpoint["hyper_parameters"]["config"]):
        for field in ("norm", "norm_groups", "attention_upsample"):
            config["MODEL_CONFIG"].pop(field)
    torch.save(checkpoint, target)
    return target


def test_checkpoint_written_before_format_2_predicts_as_trained(
    bilinear_gate_run: tuple[dict[str, Any], Path], tmp_path: Path
) -> None:
    _, trained = bilinear_gate_run
    legacy = write_format_1(trained, tmp_path / "legacy.ckpt")
    assert load_checkpoint(legacy).config.model.attention_upsample == "bilinear"
    images = [write_rgb(tmp_path / f"{i}.png", *size, seed=i) for i, size in enumerate([(40, 56)])]
    expected = Predictor.from_checkpoint(trained, device="cpu").predict_proba_batch(images)
    actual = Predictor.from_checkpoint(legacy, device="cpu").predict_proba_batch(images)
    np.testing.assert_array_equal(actual[0], expected[0])

    # The same weights under the nearest gate predict differently: the upgrade is what matters.
    checkpoint = load_checkpoint(legacy)
    config = checkpoint.config.model.model_copy(update={"attention_upsample": "nearest"})
    nearest = UNet2D(**config.model_dump())
    nearest.load_state_dict(checkpoint.state_dict)
    as_nearest = Predictor(nearest, checkpoint.config, device="cpu").predict_proba(images[0])
    assert np.abs(as_nearest - expected[0]).max() > 1e-4

    # skinet export reads it as trained too.
    exported = tmp_path / "legacy.pt"
    assert export_checkpoint(legacy, exported, "torchscript") is not None
    batch = torch.randn(2, 3, 32, 32)
    reference = UNet2D(**load_checkpoint(trained).config.model.model_dump())
    reference.load_state_dict(load_checkpoint(trained).state_dict)
    with torch.no_grad():
        expected_probs = torch.sigmoid(reference.eval()(batch))
    torch.testing.assert_close(run_exported(exported, "torchscript", batch), expected_probs)


def test_resuming_a_format_1_gate_checkpoint_names_the_setting(
    bilinear_gate_run: tuple[dict[str, Any], Path], tmp_path: Path
) -> None:
    from skinet.training.lightning_model import LightningModel
    from skinet.training.run import run_training

    raw, trained = bilinear_gate_run
    legacy = write_format_1(trained, tmp_path / "legacy.ckpt")
    raw = {**raw, "TRAIN_CONFIG": {**raw["TRAIN_CONFIG"], "max_epochs": 2}}
    raw["TRAIN_CONFIG"]["output_dir"] = str(tmp_path / "runs")
    raw["MODEL_CONFIG"] = {
        k: v for k, v in raw["MODEL_CONFIG"].items() if k != "attention_upsample"
    }
    with pytest.raises(CheckpointError, match="set MODEL_CONFIG.attention_upsample: bilinear"):
        run_training(parse_config(raw), visualize=False, resume=legacy)
    assert not (tmp_path / "runs").exists()  # refused before any run folder was made
    with pytest.raises(CheckpointError, match="trained with attention_upsample: bilinear"):
        LightningModel.load_from_checkpoint(legacy)

    raw["MODEL_CONFIG"]["attention_upsample"] = "bilinear"
    result = run_training(parse_config(raw), visualize=False, resume=legacy)
    assert result.epochs_trained == 2
