"""``skinet train --init-from``: fine-tuning from a checkpoint, checked, logged and recorded."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml
from tests.helpers.config import tiny_raw_config
from tests.helpers.inference import rewrite_checkpoint

from skinet.checkpoints.read import load_checkpoint
from skinet.cli.main import main
from skinet.config.experiment import parse_config


@pytest.fixture(scope="module")
def source_checkpoint(tmp_path_factory: pytest.TempPathFactory, synthetic_root: Path) -> Path:
    """A tiny model (8 channels, 3 levels, 32 px, instance norm) trained for one epoch."""
    from skinet.training.run import run_training

    tmp = tmp_path_factory.mktemp("source")
    raw = tiny_raw_config(tmp, synthetic_root)
    raw["TRAIN_CONFIG"].update(max_epochs=1, use_mlflow_logger=False, experiment_name="source")
    raw["MODEL_CONFIG"]["norm"] = "instance"
    raw["DATA_CONFIG"]["crop_dark_border"] = True
    result = run_training(parse_config(raw), visualize=False)
    assert result.best_checkpoint is not None
    return result.best_checkpoint


def _fine_tune_config(tmp_path: Path, synthetic_root: Path, **train: Any) -> Path:
    """A config that names no model and no preprocessing: both come from the source."""
    raw = tiny_raw_config(tmp_path, synthetic_root)
    del raw["MODEL_CONFIG"]
    raw["DATA_CONFIG"] = {"dataset": "isic2017", "data_dir": str(synthetic_root)}
    raw["TRAIN_CONFIG"].update(experiment_name="clinic", **train)
    path = tmp_path / "clinic.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def test_init_from_refuses_a_checkpoint_of_another_width_and_names_the_layer(
    tmp_path: Path, synthetic_root: Path, source_checkpoint: Path, caplog: pytest.LogCaptureFixture
) -> None:
    config = _fine_tune_config(tmp_path, synthetic_root, use_mlflow_logger=False)
    code = main(
        ["train", "--config", str(config), "--init-from", str(source_checkpoint)]
        + ["--set", "MODEL_CONFIG.out_channels_layer1=16", "--no-visualize"]
    )
    assert code == 1
    assert "layer 'encoder.0." in caplog.text and "(8, 3, 3, 3)" in caplog.text
    assert "(16, 3, 3, 3)" in caplog.text and "MODEL_CONFIG" in caplog.text
    assert not (tmp_path / "runs").exists()  # refused before any run folder was made
    caplog.clear()
    missing = tmp_path / "nope.ckpt"
    assert main(["train", "--config", str(config), "--init-from", str(missing)]) == 2
    assert f"TRAIN_CONFIG.init_checkpoint: checkpoint not found: {missing}" in caplog.text


def test_a_source_without_deep_supervision_heads_fine_tunes_with_fresh_heads(
    tmp_path: Path, synthetic_root: Path, source_checkpoint: Path
) -> None:
    config = _fine_tune_config(tmp_path, synthetic_root, use_mlflow_logger=False, max_epochs=1)
    argv = ["train", "--config", str(config), "--init-from", str(source_checkpoint)]
    assert main([*argv, "--set", "MODEL_CONFIG.deep_supervision=1", "--no-visualize"]) == 0
    (run,) = (tmp_path / "runs").glob("*/checkpoints/best*.ckpt")
    assert "aux_heads.0.weight" in load_checkpoint(run).state_dict


def test_fine_tuning_starts_from_the_weights_keeps_preprocessing_and_records_lineage(
    tmp_path: Path, synthetic_root: Path, source_checkpoint: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from mlflow.tracking import MlflowClient

    # An lr so small that one epoch leaves the weights as loaded.
    config = _fine_tune_config(tmp_path, synthetic_root, lr=1e-12, max_epochs=1)
    caplog.set_level(logging.INFO)
    code = main(
        ["train", "--config", str(config), "--init-from", str(source_checkpoint)]
        + ["--no-visualize"]
    )
    assert code == 0
    assert "from the source checkpoint: MODEL_CONFIG.out_channels_layer1=8" in caplog.text
    assert "DATA_CONFIG.crop_dark_border=True" in caplog.text
    assert "a fresh optimizer and schedule (lr 1e-12, 1 epoch(s))" in caplog.text
    (run_dir,) = [p for p in (tmp_path / "runs").iterdir() if p.is_dir() and "clinic" in p.name]
    saved = yaml.safe_load((run_dir / "config.yaml").read_text())
    assert saved["MODEL_CONFIG"]["out_channels_layer1"] == 8
    assert saved["MODEL_CONFIG"]["norm"] == "instance"
    assert saved["DATA_CONFIG"]["crop_dark_border"] is True
    assert saved["TRAIN_CONFIG"]["init_checkpoint"] == str(source_checkpoint)
    (tuned,) = (run_dir / "checkpoints").glob("best-*.ckpt")
    before, after = load_checkpoint(source_checkpoint), load_checkpoint(tuned)
    for name, weight in before.state_dict.items():
        torch.testing.assert_close(after.state_dict[name], weight, rtol=0, atol=1e-6)
    raw = torch.load(tuned, weights_only=True)
    assert raw["epoch"] == 0 and raw["global_step"] > 0  # a new run, not a continuation
    card = (run_dir / "MODEL_CARD.md").read_text()
    assert f"Fine-tuned from `{source_checkpoint.resolve()}`" in card
    store = f"sqlite:///{tmp_path / 'runs' / 'mlflow.db'}"
    (run,) = MlflowClient(store).search_runs(
        [MlflowClient(store).get_experiment_by_name("clinic").experiment_id]
    )
    assert run.data.tags["skinet.init_from"] == str(source_checkpoint.resolve())
    assert len(run.data.tags["skinet.init_from_sha256"]) == 64


def test_a_guarded_fine_tune_measures_against_the_source_threshold(
    tmp_path: Path, synthetic_root: Path, source_checkpoint: Path, caplog: pytest.LogCaptureFixture
) -> None:
    config = _fine_tune_config(
        tmp_path, synthetic_root, lr=1e-12, max_epochs=1, threshold_selection="guarded"
    )
    # A source threshold no default could stand in for.
    source_checkpoint = rewrite_checkpoint(
        source_checkpoint, tmp_path / "source.ckpt", val_optimal_threshold=0.36
    )
    assert main(["train", "--config", str(config), "--init-from", str(source_checkpoint)]) == 0
    (run_dir,) = [p for p in (tmp_path / "runs").iterdir() if p.is_dir() and "clinic" in p.name]
    saved = yaml.safe_load((run_dir / "config.yaml").read_text())
    source = load_checkpoint(source_checkpoint).threshold
    assert source == pytest.approx(0.36)
    assert saved["TRAIN_CONFIG"]["threshold_reference"] == source
    # 4 validation images, fewer than the guard needs to see a clear gain: it keeps its
    # reference, the source's threshold.
    (tuned,) = (run_dir / "checkpoints").glob("best-*.ckpt")
    assert load_checkpoint(tuned).threshold == pytest.approx(source)
    # ... and the card, the log and predictions.json say it was kept, not chosen.
    kept = "the checkpoint's validation sweep kept its threshold_reference: guarded"
    assert kept in (run_dir / "MODEL_CARD.md").read_text()
    images = synthetic_root / "ISIC-2017_Validation_Data"
    caplog.clear()
    argv = ["predict", "--checkpoint", str(tuned), "--images", str(images)]
    assert main([*argv, "--output", str(tmp_path / "masks")]) == 0
    assert kept in caplog.text
    record = json.loads((tmp_path / "masks" / "predictions.json").read_text())["threshold"]
    assert record["selection"] == "guarded"
    assert record["reference"] == pytest.approx(source)


def test_the_encoder_stays_as_loaded_while_frozen(
    tmp_path: Path, synthetic_root: Path, source_checkpoint: Path
) -> None:
    source = load_checkpoint(source_checkpoint).state_dict

    def fine_tuned(epochs: int) -> dict[str, torch.Tensor]:
        folder = tmp_path / f"epochs{epochs}"
        folder.mkdir()
        config = _fine_tune_config(
            folder, synthetic_root, lr=1e-2, max_epochs=epochs, freeze_encoder_epochs=1
        )
        argv = ["train", "--config", str(config), "--init-from", str(source_checkpoint)]
        assert main([*argv, "--no-visualize", "--set", "TRAIN_CONFIG.use_mlflow_logger=false"]) == 0
        (last,) = (folder / "runs").glob("clinic_*/checkpoints/last.ckpt")
        return load_checkpoint(last).state_dict

    def moved(weights: dict[str, torch.Tensor], prefix: str) -> bool:
        return any(
            not torch.equal(value, source[name])
            for name, value in weights.items()
            if name.startswith(prefix)
        )

    one, two = fine_tuned(1), fine_tuned(2)
    assert not moved(one, "encoder.") and moved(one, "decoder.")
    assert moved(two, "encoder.")


def test_a_fine_tuned_run_resumes_without_its_source(
    tmp_path: Path, synthetic_root: Path, source_checkpoint: Path, monkeypatch, caplog
) -> None:
    import shutil

    (tmp_path / "models").mkdir()
    shutil.copy(source_checkpoint, tmp_path / "models" / "source.ckpt")
    monkeypatch.chdir(tmp_path)
    config = _fine_tune_config(tmp_path, synthetic_root, max_epochs=1, use_mlflow_logger=False)
    argv = ["train", "--config", str(config), "--no-visualize"]
    assert main([*argv, "--init-from", "models/source.ckpt"]) == 0  # typed relative
    (run_dir,) = (tmp_path / "runs").glob("clinic_*")
    saved = yaml.safe_load((run_dir / "config.yaml").read_text())
    assert saved["TRAIN_CONFIG"]["init_checkpoint"] == str(tmp_path / "models" / "source.ckpt")

    (tmp_path / "models" / "source.ckpt").rename(tmp_path / "moved.ckpt")  # the source is gone
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    caplog.clear()
    caplog.set_level(logging.INFO)
    resumed = ["train", "--config", str(run_dir / "config.yaml"), "--resume", "last"]
    assert main([*resumed, "--no-visualize", "--set", "TRAIN_CONFIG.max_epochs=2"]) == 0
    assert "fine-tuning from" not in caplog.text
    assert torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=True)["epoch"] == 1
    card = (run_dir / "MODEL_CARD.md").read_text()
    assert f"Fine-tuned from `{tmp_path / 'models' / 'source.ckpt'}`" in card
