"""Shared fixtures: a tiny CPU config and a small synthetic dataset on disk."""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from skinet.config import ExperimentConfig, parse_config

os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")

IN_CI = os.environ.get("CI", "").lower() == "true"
"""CI installs every test dependency: there a missing one fails its tests instead of skipping."""


def requires_modules(*modules: str) -> pytest.MarkDecorator:
    """Skip where a test dependency is not installed, except in CI (``CI=true``), where the test
    runs and fails on the missing import, so that a broken install cannot pass by skipping."""
    missing = [name for name in modules if importlib.util.find_spec(name) is None]
    return pytest.mark.skipif(
        bool(missing) and not IN_CI, reason=f"missing test dependency: {', '.join(missing)}"
    )


@pytest.fixture(autouse=True)
def _restore_deterministic_mode() -> Iterator[None]:
    """A Trainer with ``deterministic=True`` switches torch's global mode on; switch it back."""
    import torch

    enabled = torch.are_deterministic_algorithms_enabled()
    warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
    yield
    torch.use_deterministic_algorithms(enabled, warn_only=warn_only)


def tiny_raw_config(tmp_path: Path, data_dir: Path | None = None) -> dict[str, Any]:
    """Plain-data config for a 32x32, 8-channel, 2-epoch CPU run writing under ``tmp_path``."""
    return {
        "TRAIN_CONFIG": {
            "experiment_name": "tiny",
            "output_dir": str(tmp_path / "runs"),
            "batch_size": 4,
            "num_workers": 0,
            "max_epochs": 2,
            "accelerator": "cpu",
            "lr": 1e-3,
            "system_metrics_interval_sec": 0.2,
            "enable_progress_bar": False,
            "num_sanity_val_steps": 0,
            "log_every_n_steps": 1,
        },
        "MODEL_CONFIG": {"out_channels_layer1": 8, "number_of_layers": 3},
        "DATA_CONFIG": {
            "dataset": "synthetic" if data_dir is None else "isic2017",
            "data_dir": str(data_dir or tmp_path / "synthetic"),
            "image_size": 32,
            "synthetic_num_train": 8,
            "synthetic_num_val": 4,
            "synthetic_num_test": 4,
            "synthetic_image_size": 64,
        },
        "SWEEP_CONFIG": {"monitor": "val_best_dice_at_threshold"},
    }


@pytest.fixture(scope="session", autouse=True)
def _private_disk_cache(tmp_path_factory: pytest.TempPathFactory):
    """Point the persistent preprocessed cache at a session folder (never the user's cache)."""
    previous = os.environ.get("SKINET_CACHE_DIR")
    os.environ["SKINET_CACHE_DIR"] = str(tmp_path_factory.mktemp("skinet_cache"))
    yield
    if previous is None:
        os.environ.pop("SKINET_CACHE_DIR", None)
    else:
        os.environ["SKINET_CACHE_DIR"] = previous


@pytest.fixture(scope="session")
def synthetic_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small synthetic dataset in the official ISIC 2017 layout (8/4/4 images, 64x64)."""
    from skinet.data.synthetic import make_synthetic_dataset

    root = tmp_path_factory.mktemp("synthetic_isic2017")
    make_synthetic_dataset(root, num_train=8, num_val=4, num_test=4, image_size=64, seed=0)
    return root


@pytest.fixture(scope="session")
def mlflow_db_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An initialised MLflow SQLite database; copying it skips the slow schema migrations."""
    from mlflow.tracking import MlflowClient

    path = tmp_path_factory.getbasetemp() / "mlflow_template.db"
    MlflowClient(f"sqlite:///{path}").search_experiments()
    return path


@pytest.fixture
def tiny_raw(tmp_path: Path, synthetic_root: Path) -> dict[str, Any]:
    """Plain-data tiny config reading the session's synthetic dataset."""
    return tiny_raw_config(tmp_path, synthetic_root)


@pytest.fixture
def tiny_config(tiny_raw: dict[str, Any]) -> ExperimentConfig:
    """A validated tiny config reading the session's synthetic dataset."""
    return parse_config(tiny_raw)
