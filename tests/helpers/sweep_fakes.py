"""A stand-in for ``run_training`` used by the fast sweep tests and the worker script."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from skinet.config.experiment import ExperimentConfig


@dataclass
class FakeResult:
    """The parts of ``RunResult`` the sweep reads."""

    metrics: dict[str, float]
    run_dir: Path
    fit_seconds: float = 0.01
    epochs_trained: int = 1
    mlflow_run_id: str | None = None


@dataclass
class FakeTrainer:
    """Stands in for ``run_training``: the monitor is ``lr * 100`` (NaN-free and ordered).

    A trial whose ``weight_decay`` is in ``failing_weight_decays`` raises as a diverged run does.
    """

    seconds: float = 0.0
    calls: list[tuple[str, ExperimentConfig]] = field(default_factory=list)
    failing_weight_decays: tuple[float, ...] = ()

    def __call__(self, cfg: ExperimentConfig, **kwargs: Any) -> FakeResult:
        self.calls.append((kwargs.get("run_name", ""), cfg))
        time.sleep(self.seconds)
        if cfg.train.weight_decay in self.failing_weight_decays:
            raise ValueError("non-finite values in loss at batch 0")
        value = cfg.train.lr * 100 + cfg.train.weight_decay
        return FakeResult({cfg.sweep.monitor: value, "test_dice": value}, Path("."))


def one_epoch(raw: dict[str, Any], **sweep: list[Any]) -> dict[str, Any]:
    """The tiny config trained for one epoch, with the given ``SWEEP_CONFIG`` lists."""
    raw["TRAIN_CONFIG"].update(max_epochs=1, use_early_stopping=False)
    raw["TRAIN_CONFIG"]["mlflow_config"] = {"log_model_summary": False, "log_checkpoint": False}
    raw["SWEEP_CONFIG"].update(
        {"batch_size": [4], "num_workers": [0], "prefetch_factor": [2], **sweep}
    )
    return raw
