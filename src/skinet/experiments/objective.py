"""The Optuna objective: train one grid point and return its monitored metric."""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import TrialState

from skinet.config.errors import ConfigError
from skinet.config.experiment import ExperimentConfig
from skinet.experiments.grid import GRID_KEY_ATTR, duplicate_of, grid_trials
from skinet.experiments.search_space import SearchSpace, build_trial_config, trial_run_name
from skinet.keys import HyperparamKey
from skinet.training.records import METRICS_FILE

log = logging.getLogger(__name__)

_MAX_ERROR_LENGTH = 2000

Objective = Callable[[optuna.Trial], float]


def min_batch_size_of(search_space: SearchSpace) -> int:
    """The smallest batch of the sweep, the batch its ``lr`` values are given for."""
    return min(int(b) for b in search_space[HyperparamKey.BATCH_SIZE.value])


def validate_grid(
    cfg: ExperimentConfig,
    search_space: SearchSpace,
    points: list[dict[str, Any]],
    trial_overrides: Mapping[str, Any] | None = None,
) -> None:
    """Build the run config of every grid point before any trains.

    Raises:
        ConfigError: Naming every grid point that does not validate and why.
    """
    min_batch_size = min_batch_size_of(search_space)
    problems = []
    for index, params in enumerate(points):
        try:
            build_trial_config(cfg, params, min_batch_size, trial_overrides)
        except ConfigError as error:
            problems.append(f"grid point {index + 1} of {len(points)}: {error}")
    if problems:
        raise ConfigError(
            f"{len(problems)} grid point(s) of SWEEP_CONFIG do not make a valid run config "
            "(nothing was trained); change these values:\n  " + "\n  ".join(problems)
        )


def build_objective(
    cfg: ExperimentConfig,
    search_space: SearchSpace,
    parent_run_id: str | None = None,
    run_training_fn: Callable[..., Any] | None = None,
    trial_overrides: Mapping[str, Any] | None = None,
) -> Objective:
    """The Optuna objective: train one grid point and return its monitored metric.

    Every :class:`HyperparamKey` member is read from the trial, so a new member needs only a
    ``SWEEP_CONFIG`` list. ``lr`` is rescaled to the trial's batch size against the smallest
    batch of the sweep. Trials that were not queued (a worker raced another for the last
    point), and duplicates of a point another trial runs, are pruned without training.

    Args:
        cfg: The base config (objective overrides already applied).
        search_space: From :func:`build_search_space`.
        parent_run_id: MLflow run the trials are nested under.
        run_training_fn: Replaces :func:`skinet.training.run.run_training` (tests).
        trial_overrides: Dotted overrides applied to every trial (its folder, its MLflow store).
    """
    if run_training_fn is None:
        from skinet.training.run import run_training

        run_training_fn = run_training
    monitor = cfg.sweep.monitor
    min_batch_size = min_batch_size_of(search_space)

    def objective(trial: optuna.Trial) -> float:
        point = trial.user_attrs.get(GRID_KEY_ATTR)
        if point is None:
            raise optuna.TrialPruned("not a queued grid point; every point is already taken")
        other = duplicate_of(trial.study, trial.number, point)
        if other is not None:
            raise optuna.TrialPruned(f"grid point {point} is run by trial {other}")
        params = {
            key.value: trial.suggest_categorical(key.value, search_space[key.value])
            for key in HyperparamKey
        }
        run_name = trial_run_name(trial.number, params)
        try:
            trial_cfg = build_trial_config(cfg, params, min_batch_size, trial_overrides)
            mark_earlier_attempts(trial.study, trial.number, point, params, trial_cfg)
            trial.set_user_attr("lr_scaled", trial_cfg.train.lr)
            result = run_training_fn(
                trial_cfg, visualize=False, parent_run_id=parent_run_id, run_name=run_name
            )
            if monitor not in result.metrics:
                raise ValueError(
                    f"the run did not log the monitored metric {monitor!r} "
                    f"(logged: {sorted(result.metrics)})"
                )
            value = float(result.metrics[monitor])
            if not math.isfinite(value):
                raise ValueError(f"{monitor} is {value}")
        except Exception as error:
            trial.set_user_attr("error", f"{type(error).__name__}: {error}"[:_MAX_ERROR_LENGTH])
            log.warning("trial %d (%s) failed: %s", trial.number, run_name, error)
            raise
        trial.set_user_attr("run_name", run_name)
        trial.set_user_attr("run_dir", str(result.run_dir))
        trial.set_user_attr("fit_seconds", result.fit_seconds)
        if result.mlflow_run_id:
            trial.set_user_attr("mlflow_run_id", result.mlflow_run_id)
        return value

    return objective


def mark_earlier_attempts(
    study: optuna.Study, number: int, point: str, params: Mapping[str, Any], cfg: ExperimentConfig
) -> list[Path]:
    """Rename the folders of earlier attempts at ``point`` that did not finish.

    A killed or failed trial leaves its run folder (config, logs, maybe checkpoints) under the
    trial's name; beside the retry's folder it would look like a second result of the point.
    Each one without ``metrics.json`` becomes ``<name>.killed`` (no error recorded: the worker
    died) or ``<name>.failed``, kept for inspection. Returns the new paths.
    """
    output_dir = Path(cfg.train.output_dir)
    renamed = []
    for earlier in grid_trials(study, TrialState.FAIL):
        if earlier.number >= number or earlier.user_attrs.get(GRID_KEY_ATTR) != point:
            continue
        folder = output_dir / trial_run_name(earlier.number, params)
        if not folder.is_dir() or (folder / METRICS_FILE).is_file():
            continue
        suffix = ".failed" if "error" in earlier.user_attrs else ".killed"
        target = folder.with_name(folder.name + suffix)
        if target.exists():
            continue
        folder.rename(target)
        log.info("trial %d: the unfinished attempt %s is now %s", number, folder, target.name)
        renamed.append(target)
    return renamed
