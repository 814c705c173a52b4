"""The grid, per-trial configs and objective overrides, without training."""

from __future__ import annotations

from typing import Any

import pytest

from skinet.cli.experiments import objective_overrides
from skinet.config.errors import ConfigError
from skinet.config.experiment import load_config, parse_config
from skinet.experiments.search_space import (
    build_search_space,
    build_trial_config,
    grid_points,
    scale_lr,
    trial_run_name,
    validate_search_space,
)
from skinet.experiments.study import parent_run_name
from skinet.keys import HyperparamKey

FULL = {key.value: [1] for key in HyperparamKey}


def test_search_space_has_every_hyperparam_key(tiny_raw: dict[str, Any]) -> None:
    tiny_raw["SWEEP_CONFIG"].update(lr=[1e-3, 2e-3], scheduler_type=["none", "cosine_annealing"])
    space = build_search_space(parse_config(tiny_raw).sweep)
    assert list(space) == [key.value for key in HyperparamKey]
    assert space["lr"] == [1e-3, 2e-3]
    assert len(grid_points(space)) == 4


@pytest.mark.parametrize(
    ("space", "message"),
    [
        ({k: v for k, v in FULL.items() if k != "weight_decay"}, "missing key(s) ['weight_decay']"),
        ({**FULL, "momentum": [0.9]}, "unknown key(s) ['momentum']"),
        ({**FULL, "lr": []}, "no candidate value for ['lr']"),
    ],
)
def test_validate_search_space_names_the_bad_key(space: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError) as info:
        validate_search_space(space)
    assert message in str(info.value)
    assert str([key.value for key in HyperparamKey]) in str(info.value)


def test_validate_search_space_accepts_exactly_the_members() -> None:
    validate_search_space(FULL)


@pytest.mark.parametrize(
    ("lr", "batch", "smallest", "expected"),
    [(1e-3, 8, 8, 1e-3), (1e-3, 16, 8, 2e-3), (3e-4, 32, 8, 1.2e-3), (2e-3, 4, 4, 2e-3)],
)
def test_scale_lr(lr: float, batch: int, smallest: int, expected: float) -> None:
    assert scale_lr(lr, batch, smallest) == pytest.approx(expected)


def test_scale_lr_rejects_non_positive_batches() -> None:
    with pytest.raises(ValueError, match="batch sizes must be positive"):
        scale_lr(1e-3, 0, 8)


def _params(**changes: Any) -> dict[str, Any]:
    params: dict[str, Any] = {
        "lr": 1e-3,
        "weight_decay": 0.01,
        "batch_size": 8,
        "num_workers": 0,
        "prefetch_factor": 2,
        "scheduler_type": "none",
    }
    return {**params, **changes}


def test_trial_config_scheduler_none_turns_the_scheduler_off(tiny_raw: dict[str, Any]) -> None:
    cfg = parse_config(tiny_raw)
    assert cfg.train.use_lr_scheduler
    trial = build_trial_config(cfg, _params(), min_batch_size=4)
    assert trial.train.use_lr_scheduler is False
    assert trial.train.lr == pytest.approx(2e-3)  # 1e-3 * 8 / 4
    assert (trial.train.batch_size, trial.train.weight_decay) == (8, 0.01)
    assert (trial.train.num_workers, trial.train.prefetch_factor) == (0, 2)


def test_trial_config_rederives_cosine_t_max(tiny_raw: dict[str, Any]) -> None:
    tiny_raw["TRAIN_CONFIG"]["max_epochs"] = 3
    cfg = parse_config(tiny_raw)
    assert cfg.train.cosine_annealing_config.T_max == 3
    trial = build_trial_config(
        cfg,
        _params(scheduler_type="cosine_annealing"),
        min_batch_size=8,
        extra_overrides={"TRAIN_CONFIG.max_epochs": 5},
    )
    assert trial.train.use_lr_scheduler and trial.train.scheduler_type == "cosine_annealing"
    assert trial.train.cosine_annealing_config.T_max == 5


def test_trial_config_follows_a_changed_monitor(tiny_raw: dict[str, Any], tmp_path: Any) -> None:
    import yaml

    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(tiny_raw))
    cfg = load_config(path, objective_overrides("val_loss", "minimize", environ={}))
    trial = build_trial_config(cfg, _params(), min_batch_size=8)
    assert trial.sweep.monitor == "val_loss"
    assert trial.train.checkpoint_config.monitor == "val_loss"
    assert trial.train.early_stopping_config.mode == "min"


def test_bad_combination_is_a_config_error(tiny_raw: dict[str, Any]) -> None:
    with pytest.raises(ConfigError, match="TRAIN_CONFIG.weight_decay"):
        build_trial_config(parse_config(tiny_raw), _params(weight_decay=-1.0), min_batch_size=8)


@pytest.mark.parametrize(
    ("flag", "env", "expected"),
    [
        (None, {}, {}),
        (None, {"SWEEP_MONITOR": "val_loss"}, {"SWEEP_CONFIG.monitor": "val_loss"}),
        ("val_dice", {"SWEEP_MONITOR": "val_loss"}, {"SWEEP_CONFIG.monitor": "val_dice"}),
    ],
)
def test_objective_overrides_flag_beats_env(
    flag: str | None, env: dict[str, str], expected: dict[str, str]
) -> None:
    assert objective_overrides(flag, None, environ=env) == expected


def test_direction_override_from_env() -> None:
    env = {"SWEEP_DIRECTION": "minimize"}
    assert objective_overrides(None, None, env) == {"SWEEP_CONFIG.direction": "minimize"}
    assert objective_overrides(None, "maximize", env) == {"SWEEP_CONFIG.direction": "maximize"}


def test_run_names(tiny_raw: dict[str, Any]) -> None:
    assert trial_run_name(3, _params(lr=3e-4)) == ("trial_3_lr0.0003_wd0.01_bs8_nw0_pf2_schednone")
    assert parent_run_name(parse_config(tiny_raw)) == "optuna_study_tiny_val_best_dice_at_threshold"
