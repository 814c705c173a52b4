"""Fixtures of the inference tests: one real checkpoint trained for an epoch, shared."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.conftest import tiny_raw_config

from skinet.config import parse_config


@pytest.fixture(scope="session")
def trained_checkpoint(tmp_path_factory: pytest.TempPathFactory, synthetic_root: Path) -> Path:
    """A real SkiNet checkpoint: the tiny 32x32 config trained for one epoch by run_training."""
    from skinet.training.run import run_training

    tmp = tmp_path_factory.mktemp("trained")
    raw = tiny_raw_config(tmp, synthetic_root)
    raw["TRAIN_CONFIG"].update(max_epochs=1, use_mlflow_logger=False)
    result = run_training(parse_config(raw), visualize=False)
    assert result.best_checkpoint is not None
    return result.best_checkpoint
