"""Off a terminal, training logs a line per epoch and at least one per interval."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from tests.helpers.config import tiny_raw_config

from skinet.config.experiment import parse_config

REPO = Path(__file__).resolve().parents[3]


def test_a_run_without_the_progress_bar_logs_epochs_steps_and_the_time_left(
    tmp_path: Path, synthetic_root: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from skinet.training.run import run_training

    raw = tiny_raw_config(tmp_path, synthetic_root)
    raw["TRAIN_CONFIG"].update(
        use_mlflow_logger=False,
        max_time="00:00:10:00",
        progress_log_interval_sec=1e-6,  # a step line after every batch
    )
    caplog.set_level(logging.INFO, logger="skinet.progress")
    run_training(parse_config(raw), visualize=False)
    lines = [r.getMessage() for r in caplog.records if r.name == "skinet.progress"]
    epochs = [line for line in lines if " done: " in line]
    assert [line.split(" done")[0] for line in epochs] == ["epoch 1/2", "epoch 2/2"]
    for line in epochs:
        assert "2 steps" in line and "train_loss " in line and "val_dice " in line
        assert "images/s" in line and "left of max_time 0:10:00" in line
    steps = [line for line in lines if " step " in line]
    assert steps and steps[0].startswith("epoch 1/2 step ") and "loss " in steps[0]


@pytest.mark.heavy
def test_training_redirected_to_a_file_shows_epoch_lines(
    tmp_path: Path, synthetic_root: Path
) -> None:
    raw = tiny_raw_config(tmp_path, synthetic_root)
    raw["TRAIN_CONFIG"].update(use_mlflow_logger=False, enable_progress_bar=True)
    config = tmp_path / "tiny.yaml"
    config.write_text(yaml.safe_dump(raw))
    log_file = tmp_path / "train.log"
    env = {k: v for k, v in os.environ.items() if k not in ("LOCAL_RANK", "MASTER_PORT")}
    with log_file.open("w") as handle:
        done = subprocess.run(
            [sys.executable, "main_run.py", "--config", str(config), "--no-visualize"],
            cwd=REPO,
            stdout=handle,
            stderr=subprocess.STDOUT,
            env=env,
            timeout=300,
        )
    text = log_file.read_text()
    assert done.returncode == 0, text[-2000:]
    assert "epoch 1/2 done: 2 steps" in text and "epoch 2/2 done: 2 steps" in text
