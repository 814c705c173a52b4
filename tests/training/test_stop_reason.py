"""Why a run stopped: ``metrics.json``, the MLflow run's tag and ``skinet train``'s summary."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from mlflow.tracking import MlflowClient

from skinet.cli.main import main
from skinet.config.experiment import load_config
from skinet.tracking.mlflow_utils import resolve_tracking_uri


@pytest.mark.parametrize(
    ("settings", "expected", "printed"),
    [
        ({"max_epochs": 2}, "max_epochs", "stopped by TRAIN_CONFIG.max_epochs"),
        (
            # No change of the monitor can be 1.0: the epoch after the first ends the run.
            {"max_epochs": 20, "early_stopping_config": {"patience": 1, "min_delta": 1.0}},
            "early_stopping",
            "stopped by early stopping",
        ),
        (
            {"max_epochs": 500, "max_time": {"seconds": 2}, "use_early_stopping": False},
            "max_time",
            "stopped by the time budget (TRAIN_CONFIG.max_time)",
        ),
    ],
)
def test_a_run_records_why_it_stopped(
    tiny_raw: dict[str, Any],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    settings: dict[str, Any],
    expected: str,
    printed: str,
) -> None:
    tiny_raw["TRAIN_CONFIG"].update(settings)
    config = tmp_path / "run.yaml"
    config.write_text(yaml.safe_dump(tiny_raw))

    assert main(["train", "--config", str(config), "--no-visualize"]) == 0

    (metrics_file,) = (tmp_path / "runs").glob("*/metrics.json")
    summary = json.loads(metrics_file.read_text())
    assert summary["stopped_by"] == expected
    if expected == "early_stopping":
        assert summary["epochs_trained"] == 2  # the first epoch, and one without improvement
    client = MlflowClient(resolve_tracking_uri(load_config(config)))
    assert client.get_run(summary["mlflow_run_id"]).data.tags["skinet.stopped_by"] == expected
    assert printed in " ".join(capsys.readouterr().out.split())


def test_an_early_stop_epochs_after_the_best_one_is_recorded_as_early_stopping(
    tiny_raw: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A learning rate too small to move a weight and no running statistics: every epoch scores
    # the same, so the first stays the best and patience 2 ends the run after the third.
    tiny_raw["TRAIN_CONFIG"].update(
        max_epochs=20, lr=1e-12, early_stopping_config={"patience": 2}, use_mlflow_logger=False
    )
    tiny_raw["MODEL_CONFIG"]["norm"] = "instance"
    config = tmp_path / "run.yaml"
    config.write_text(yaml.safe_dump(tiny_raw))

    assert main(["train", "--config", str(config), "--no-visualize"]) == 0

    (metrics_file,) = (tmp_path / "runs").glob("*/metrics.json")
    summary = json.loads(metrics_file.read_text())
    assert summary["epochs_trained"] == 3 and summary["metrics"]["best_epoch"] == 0
    assert summary["stopped_by"] == "early_stopping"
    assert "stopped by early stopping" in " ".join(capsys.readouterr().out.split())
