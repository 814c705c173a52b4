"""A run's config holds what the user wrote; the machine's values are resolved where it runs.

"Another machine" is simulated by changing the CPU count between a run and its resume: the
automatic ``num_workers`` is the CPU count divided among the processes of the node.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml

from skinet.checkpoints.format import CHECKPOINT_KEY
from skinet.cli.main import main


def _train(args: list[str], cpus: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "cpu_count", lambda: cpus)
    assert main(["train", *args, "--no-visualize"]) == 0


def _saved(run: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """``config.yaml`` and the SkiNet entry of ``last.ckpt``."""
    config = yaml.safe_load((run / "config.yaml").read_text())
    payload = torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)[CHECKPOINT_KEY]
    return config, payload


@pytest.mark.process  # the automatic num_workers starts DataLoader workers
def test_a_resume_on_another_machine_resolves_the_automatic_values_again(
    tiny_raw: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tiny_raw["TRAIN_CONFIG"].update(max_epochs=1, num_workers=None, use_mlflow_logger=False)
    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump(tiny_raw))
    _train(["--config", str(config)], cpus=2, monkeypatch=monkeypatch)
    (run,) = (p for p in (tmp_path / "runs").iterdir() if p.is_dir())
    first, payload = _saved(run)
    assert first["TRAIN_CONFIG"]["num_workers"] is None  # as written
    assert first["RESOLVED"]["num_workers"] == 2  # this machine's value, apart
    assert payload["config"]["TRAIN_CONFIG"]["num_workers"] is None
    assert payload["resolved"]["num_workers"] == 2

    resume = ["--config", str(run / "config.yaml"), "--resume", "last"]
    _train([*resume, "--set", "TRAIN_CONFIG.max_epochs=2"], cpus=1, monkeypatch=monkeypatch)
    second, payload = _saved(run)
    assert second["TRAIN_CONFIG"]["num_workers"] is None
    assert second["RESOLVED"]["num_workers"] == 1  # resolved again on the "new machine"
    assert payload["resolved"]["num_workers"] == 1
    assert payload["config"]["TRAIN_CONFIG"]["max_epochs"] == 2
