"""A tiny CPU config, and test dependencies that skip locally but fail in CI."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from typing import Any

import pytest

IN_CI = os.environ.get("CI", "").lower() == "true"
"""CI installs every test dependency: there a missing one fails its tests instead of skipping."""


def requires_modules(*modules: str) -> pytest.MarkDecorator:
    """Skip where a test dependency is not installed, except in CI (``CI=true``), where the test
    runs and fails on the missing import, so that a broken install cannot pass by skipping."""
    missing = [name for name in modules if importlib.util.find_spec(name) is None]
    return pytest.mark.skipif(
        bool(missing) and not IN_CI, reason=f"missing test dependency: {', '.join(missing)}"
    )


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
