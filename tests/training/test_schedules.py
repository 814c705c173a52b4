"""``scheduler_type: cosine_budget``: a cosine over ``TRAIN_CONFIG.max_time``, or over
``max_epochs`` when they end the run first."""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch

from skinet.config.errors import ConfigError
from skinet.config.experiment import parse_config
from skinet.training.records import RunResult
from skinet.training.run import run_training
from skinet.training.schedules import BudgetCosineLR


def test_the_cosine_follows_the_share_of_the_budget_spent() -> None:
    spent = [0.0]
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    schedule = BudgetCosineLR(optimizer, lambda: spent[0], eta_min=0.1)
    seen = []
    for share in (0.0, 0.25, 0.5, 1.0, 1.5):
        spent[0] = share
        schedule.step()
        seen.append(optimizer.param_groups[0]["lr"])
    expected = [0.1 + 0.9 * (1 + math.cos(math.pi * min(s, 1.0))) / 2 for s in (0, 0.25, 0.5, 1, 1)]
    assert seen == pytest.approx(expected)
    assert "progress" not in schedule.state_dict()  # a checkpoint holds no function


def test_cosine_budget_without_max_time_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match=r"cosine_budget anneals over the time budget.*max_time"):
        parse_config({"TRAIN_CONFIG": {"scheduler_type": "cosine_budget"}})
    parse_config({"TRAIN_CONFIG": {"scheduler_type": "cosine_budget", "use_lr_scheduler": False}})


LR, ETA_MIN = 1e-3, 1e-5


def _budget_run(raw: dict[str, Any], max_epochs: int, max_time: dict[str, int]) -> RunResult:
    """A ``cosine_budget`` run of the tiny model from ``LR`` to ``ETA_MIN``."""
    raw["TRAIN_CONFIG"].update(
        lr=LR,
        max_epochs=max_epochs,
        max_time=max_time,
        use_early_stopping=False,
        scheduler_type="cosine_budget",
        cosine_annealing_config={"eta_min": ETA_MIN},
    )
    return run_training(parse_config(raw), visualize=False)


def _last_lr(result: RunResult) -> float:
    """The learning rate the schedule set last: the optimizer's in ``last.ckpt``."""
    last = torch.load(
        result.run_dir / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False
    )
    return float(last["optimizer_states"][0]["param_groups"][0]["lr"])


def test_the_budget_schedule_reaches_its_minimum_when_max_time_ends(
    tiny_raw: dict[str, Any],
) -> None:
    from mlflow.tracking import MlflowClient

    from skinet.tracking.mlflow_utils import resolve_tracking_uri

    result = _budget_run(tiny_raw, max_epochs=10_000, max_time={"seconds": 6})
    assert result.epochs_trained < 10_000  # the budget, not the epochs, ended it

    history = MlflowClient(resolve_tracking_uri(parse_config(tiny_raw))).get_metric_history(
        result.mlflow_run_id, "lr-AdamW"
    )
    logged = [m.value for m in sorted(history, key=lambda m: m.step)]
    assert len(logged) > 3  # logged every step (log_every_n_steps: 1), not per epoch
    assert logged[0] == pytest.approx(LR, rel=0.05)
    assert all(later <= earlier for earlier, later in zip(logged, logged[1:], strict=False))
    # Past the middle of the cosine by the last logged step: how near the end that step began
    # depends on how long a step takes on a busy machine, so the end is checked on the rate the
    # schedule set last (below), not on the last logged one.
    assert logged[-1] < ETA_MIN + 0.5 * (LR - ETA_MIN)
    # Lightning steps the schedule just before its Timer checks the clock, so the deadline can
    # pass in between: the last step then sees a share a hair under 1, not exactly 1.
    assert ETA_MIN <= _last_lr(result) <= ETA_MIN + 1e-4 * (LR - ETA_MIN)


def test_a_run_that_max_epochs_ends_first_anneals_to_the_minimum_by_its_last_step(
    tiny_raw: dict[str, Any],
) -> None:
    # 30 minutes: far more than two epochs of the tiny model take
    result = _budget_run(tiny_raw, max_epochs=2, max_time={"minutes": 30})
    assert (result.stopped_by, result.epochs_trained) == ("max_epochs", 2)
    assert _last_lr(result) == pytest.approx(ETA_MIN)
