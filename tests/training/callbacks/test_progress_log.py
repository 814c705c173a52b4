"""Training progress: log lines off a terminal, and a progress bar that counts epochs like them."""

from __future__ import annotations

import logging
import os
import re
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import lightning as L
import pytest
import torch
import yaml
from lightning.pytorch.callbacks import Callback, Timer
from tests.helpers.config import tiny_raw_config
from torch.utils.data import DataLoader, TensorDataset

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


def _config_with_the_bar(tmp_path: Path, synthetic_root: Path) -> Path:
    """The tiny config with the progress bar on, as a file."""
    raw = tiny_raw_config(tmp_path, synthetic_root)
    raw["TRAIN_CONFIG"].update(use_mlflow_logger=False, enable_progress_bar=True)
    config = tmp_path / "tiny.yaml"
    config.write_text(yaml.safe_dump(raw))
    return config


def _train_in_a_process(command: list[str], log_file: Path, **env: str) -> tuple[int, str]:
    """Run a training command line in a process of its own, its output into ``log_file`` as
    ``> train.log 2>&1`` would write it; its exit status and that output."""
    env = {k: v for k, v in os.environ.items() if k not in ("LOCAL_RANK", "MASTER_PORT")} | env
    with log_file.open("w") as handle:
        run = subprocess.run(
            [sys.executable, *command],
            cwd=REPO,
            env=env,
            timeout=300,
            check=False,
            stdout=handle,
            stderr=subprocess.STDOUT,
        )
    return run.returncode, log_file.read_text()


@pytest.mark.heavy
def test_training_redirected_to_a_file_shows_epoch_lines(
    tmp_path: Path, synthetic_root: Path
) -> None:
    config = _config_with_the_bar(tmp_path, synthetic_root)
    command = ["main_run.py", "--config", str(config), "--no-visualize"]
    code, text = _train_in_a_process(command, tmp_path / "train.log")
    assert code == 0, text[-2000:]
    assert "epoch 1/2 done: 2 steps" in text and "epoch 2/2 done: 2 steps" in text
    assert not re.search(r"Epoch \d+/\d+", text), "the progress bar drew into the file"


class _TinySegmenter(L.LightningModule):
    """One convolution on random tensors: an epoch of four steps, validated; its first step
    takes ``first_step_s``."""

    def __init__(self, first_step_s: float = 0.0) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 1, 3, padding=1)
        self.first_step_s = first_step_s

    def _loss(self, batch: list[torch.Tensor]) -> torch.Tensor:
        images, masks = batch
        return torch.nn.functional.binary_cross_entropy_with_logits(self.conv(images), masks)

    def training_step(self, batch: list[torch.Tensor], batch_idx: int) -> torch.Tensor:
        if self.global_step == 0:
            time.sleep(self.first_step_s)
        loss = self._loss(batch)
        self.log("train_loss", loss, on_epoch=True, on_step=False)
        return loss

    def validation_step(self, batch: list[torch.Tensor], batch_idx: int) -> None:
        self.log("val_loss", self._loss(batch))

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.01)


def _loader() -> DataLoader:
    images = torch.randn(8, 3, 8, 8)
    masks = (torch.rand(8, 1, 8, 8) > 0.5).float()
    return DataLoader(TensorDataset(images, masks), batch_size=2)


class _StopAtStep(Callback):
    def __init__(self, epoch: int, step: int) -> None:
        self.epoch, self.step = epoch, step

    def on_train_batch_end(self, trainer: L.Trainer, *args: object) -> None:
        if trainer.current_epoch == self.epoch and args[-1] == self.step - 1:
            trainer.should_stop = True


@pytest.mark.parametrize(
    ("stop", "first_step_s", "expected"),
    [
        # A one-second budget, and a first step that takes longer: Lightning's Timer stops there.
        (
            Timer(duration=timedelta(seconds=1)),
            1.2,
            "epoch 1/3 stopped after 1 of 4 steps (max_time reached)",
        ),
        (
            _StopAtStep(epoch=1, step=2),
            0.0,
            "epoch 2/3 stopped after 2 of 4 steps (training stopped)",
        ),
    ],
)
def test_an_epoch_cut_short_says_so_with_the_steps_it_ran(
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    stop: Callback,
    first_step_s: float,
    expected: str,
) -> None:
    from skinet.training.callbacks.progress_log import ProgressLogCallback

    caplog.set_level(logging.INFO, logger="skinet.progress")
    trainer = L.Trainer(
        max_epochs=3,
        accelerator="cpu",
        callbacks=[ProgressLogCallback(interval_s=1e9, progress_bar=False), stop],
        default_root_dir=tmp_path,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
    )
    trainer.fit(_TinySegmenter(first_step_s), _loader(), _loader())
    lines = [r.getMessage() for r in caplog.records if r.name == "skinet.progress"]
    assert lines[-1].startswith(expected), lines
    # The cut epoch was validated (Lightning validates an epoch stopped early); the epochs before
    # it ran whole.
    assert "val_loss " in lines[-1] and "images/s" in lines[-1]
    before = lines[:-1]
    assert all(line.startswith(f"epoch {n}/3 done: 4 steps, ") for n, line in enumerate(before, 1))


@pytest.mark.process
def test_the_progress_bar_counts_epochs_like_the_log_lines(
    tmp_path: Path, synthetic_root: Path
) -> None:
    config = _config_with_the_bar(tmp_path, synthetic_root)
    command = ["-m", "skinet", "train", "--config", str(config), "--no-visualize"]
    # TTY_COMPATIBLE: rich draws as on a terminal although the output is a file.
    code, printed = _train_in_a_process(
        command, tmp_path / "printed.txt", TTY_COMPATIBLE="1", COLUMNS="160"
    )
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", printed)
    assert code == 0, text[-2000:]
    assert "Epoch 1/2" in text and "Epoch 2/2" in text, text[-2000:]
    assert "Epoch 0/1" not in text and "Epoch 1/1" not in text
    # The run's card gives the command as it was typed.
    (card,) = (tmp_path / "runs").glob("*/MODEL_CARD.md")
    assert f"python -m skinet train --config {config} --no-visualize" in card.read_text()


def test_off_a_terminal_a_log_record_is_one_line_and_tables_are_not_cut(
    tmp_path: Path, synthetic_root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from skinet.cli.main import main

    raw = tiny_raw_config(
        tmp_path / ("a_folder_name_long_enough_to_pass_80_columns" * 2), synthetic_root
    )
    raw["TRAIN_CONFIG"].update(use_mlflow_logger=False)
    config = tmp_path / "tiny.yaml"
    config.write_text(yaml.safe_dump(raw))
    assert main(["train", "--config", str(config), "--no-visualize"]) == 0
    out = capsys.readouterr().out
    (best,) = Path(raw["TRAIN_CONFIG"]["output_dir"]).glob("*/checkpoints/best-*.ckpt")
    # Rich would wrap these at 80 columns and split the path mid-name.
    assert any(line.endswith(f"checkpoint path at {best}") for line in out.splitlines()), out
    assert any(line.endswith(f"best checkpoint:  {best}") for line in out.splitlines()), out
