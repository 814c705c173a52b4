"""An initialised MLflow SQLite database shared by the tracking tests."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest


@pytest.fixture
def sqlite_uri(tmp_path: Path, mlflow_db_template: Path) -> str:
    """A fresh, initialised store in ``tmp_path``."""
    dest = tmp_path / "store" / "mlflow.db"
    dest.parent.mkdir(parents=True)
    shutil.copyfile(mlflow_db_template, dest)
    return f"sqlite:///{dest}"


@pytest.fixture
def config_from(tmp_path: Path) -> Any:
    """``config_from(**mlflow_config) -> ExperimentConfig`` writing under ``tmp_path/runs``."""
    from skinet.config.experiment import parse_config

    def build(**mlflow_config: Any) -> Any:
        return parse_config(
            {
                "TRAIN_CONFIG": {
                    "experiment_name": "tiny",
                    "output_dir": str(tmp_path / "runs"),
                    "accelerator": "cpu",
                    "mlflow_config": mlflow_config,
                }
            }
        )

    return build
