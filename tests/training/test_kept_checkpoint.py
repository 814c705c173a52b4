"""``checkpoint_config.select``: which epoch's weights a run keeps as its model, through
``skinet train`` (real tiny runs on the CPU)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml

from skinet.cli.main import main


def _train(raw: dict[str, Any], tmp_path: Path) -> int:
    config = tmp_path / "tiny.yaml"
    config.write_text(yaml.safe_dump(raw))
    return main(["train", "--config", str(config), "--no-visualize"])


def test_select_last_keeps_tests_and_reports_the_last_epochs_weights(
    tiny_raw: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tiny_raw["TRAIN_CONFIG"].update(
        max_epochs=3, use_early_stopping=False, checkpoint_config={"select": "last"}
    )
    # The monitor's best is the first epoch (the highest validation loss), not the last.
    tiny_raw["SWEEP_CONFIG"] = {"monitor": "val_loss", "direction": "maximize"}
    assert _train(tiny_raw, tmp_path) == 0
    (metrics_file,) = (tmp_path / "runs").glob("*/metrics.json")
    metrics = json.loads(metrics_file.read_text())
    kept = Path(metrics["best_checkpoint"])
    assert kept.name == "best-epoch=002.ckpt"
    assert sorted(p.name for p in kept.parent.glob("best-*.ckpt")) == [kept.name]
    assert metrics["metrics"]["best_epoch"] == 2
    printed = capsys.readouterr().out
    assert f"last checkpoint:  {kept}" in printed.splitlines()
    assert "best checkpoint:" not in printed
    out = " ".join(printed.split())
    assert kept.name in out and "(last epoch)" in out
    card = (kept.parents[1] / "MODEL_CARD.md").read_text()
    assert "The last epoch's weights kept" in card and "(epoch 2, 0-based)" in card
    weights = torch.load(kept, map_location="cpu", weights_only=True)["state_dict"]
    last = torch.load(kept.parent / "last.ckpt", map_location="cpu", weights_only=True)
    assert weights.keys() == last["state_dict"].keys()
    assert all(torch.equal(weights[k], last["state_dict"][k]) for k in weights)


def test_select_last_with_early_stopping_is_a_usage_error(
    tiny_raw: dict[str, Any], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    tiny_raw["TRAIN_CONFIG"].update(use_early_stopping=True, checkpoint_config={"select": "last"})
    assert _train(tiny_raw, tmp_path) == 2
    said = caplog.text
    assert "checkpoint_config.select: last" in said and "use_early_stopping: false" in said, said
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").glob("*/checkpoints"))


def test_a_resumed_select_last_run_keeps_its_new_last_epoch(
    tiny_raw: dict[str, Any], tmp_path: Path
) -> None:
    tiny_raw["TRAIN_CONFIG"].update(
        max_epochs=1,
        use_early_stopping=False,
        use_mlflow_logger=False,
        checkpoint_config={"select": "last"},
    )
    assert _train(tiny_raw, tmp_path) == 0
    config = tmp_path / "tiny.yaml"
    assert (
        main(
            [
                "train",
                "--config",
                str(config),
                "--resume",
                "last",
                "--no-visualize",
                "--set",
                "TRAIN_CONFIG.max_epochs=2",
            ]
        )
        == 0
    )
    (folder,) = (tmp_path / "runs").glob("*/checkpoints")
    assert sorted(p.name for p in folder.glob("best-*.ckpt")) == ["best-epoch=001.ckpt"]
    kept = torch.load(folder / "best-epoch=001.ckpt", map_location="cpu", weights_only=True)
    last = torch.load(folder / "last.ckpt", map_location="cpu", weights_only=True)
    assert kept["epoch"] == last["epoch"] == 1
    assert all(torch.equal(kept["state_dict"][k], v) for k, v in last["state_dict"].items())
