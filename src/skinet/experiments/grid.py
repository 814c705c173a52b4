"""The grid queue of a study: one waiting trial per grid point, and each point's final state.

A grid point is identified by :func:`grid_key` (stored as the trial user attribute
``grid_key``). A point can have several trials (a retry after a failure or a kill); its state
is that of its best trial: ``COMPLETE`` if any trial completed, ``RUNNING`` while one is waiting
or running, else ``FAIL``.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from skinet.experiments.search_space import grid_key

log = logging.getLogger(__name__)

GRID_KEY_ATTR = "grid_key"
"""Trial user attribute marking a queued grid point (its canonical parameters)."""
GRID_READY_ATTR = "grid_ready"
"""Study user attribute set once every grid point is queued (the number queued)."""
SEARCH_SPACE_ATTR = "search_space"
"""Study user attribute holding the grid the study was created with."""
PARENT_RUN_ATTR = "mlflow_parent_run_id"
"""Study user attribute holding the MLflow parent run id."""
TRACKING_URI_ATTR = "mlflow_tracking_uri"
"""Study user attribute holding the MLflow tracking URI every worker must log to."""
STUDY_FOLDER_ATTR = "study_folder"
"""Study user attribute naming the folder of its trial runs under ``TRAIN_CONFIG.output_dir``."""
KILLED_ERROR = "killed (heartbeat stopped)"


@dataclass
class SweepResult:
    """The state of the grid when a worker leaves: every point counted once, by its final state."""

    study_name: str
    storage: str
    monitor: str
    direction: str
    n_queued: int
    completed: list[int] = field(default_factory=list)
    """The completed trial of each completed grid point."""
    failed: dict[int, str] = field(default_factory=dict)
    """The last trial of each grid point whose trials all failed, with its error."""
    failed_trials: list[int] = field(default_factory=list)
    """Every failed trial, also those whose point was retried successfully."""
    best_params: dict[str, Any] | None = None
    best_value: float | None = None
    best_trial: int | None = None
    parent_run_id: str | None = None
    plot_path: Path | None = None

    @property
    def finished(self) -> bool:
        """Every grid point completed."""
        return len(self.completed) == self.n_queued and not self.failed


class QueuedGridSampler(optuna.samplers.GridSampler):
    """``GridSampler`` that can tell the grid id of a point, so queued trials carry one.

    ``enqueue_trial`` leaves out the ``grid_id`` that ``GridSampler.after_trial`` reads; with a
    one-point grid it then fails with ``KeyError: 'grid_id'``. Queuing with the grid id (see
    :func:`enqueue_grid`) keeps the sampler's own accounting correct.
    """

    def grid_id(self, params: Mapping[str, Any]) -> int:
        """Index of ``params`` in the sampler's (shuffled) grid."""
        values = tuple(params[name] for name in self._param_names)
        return self._all_grids.index(values)

    @property
    def search_space(self) -> dict[str, list[Any]]:
        """The grid as the sampler stores it in each trial (parameters sorted by name)."""
        return {name: list(values) for name, values in self._search_space.items()}


def grid_trials(study: optuna.Study, *states: TrialState) -> list[FrozenTrial]:
    """The study's trials that run a queued grid point, optionally only in ``states``."""
    return [
        t
        for t in study.get_trials(deepcopy=False, states=states or None)
        if GRID_KEY_ATTR in t.user_attrs
    ]


def point_states(trials: list[FrozenTrial]) -> dict[str, TrialState]:
    """The state of each grid point (see the module docstring) from all its trials."""
    states: dict[str, set[TrialState]] = {}
    for trial in trials:
        states.setdefault(trial.user_attrs[GRID_KEY_ATTR], set()).add(trial.state)
    return {key: _point_state(held) for key, held in states.items()}


def _point_state(states: set[TrialState]) -> TrialState:
    if TrialState.COMPLETE in states:
        return TrialState.COMPLETE
    if states & {TrialState.RUNNING, TrialState.WAITING}:
        return TrialState.RUNNING
    return TrialState.FAIL


def enqueue_grid(
    study: optuna.Study,
    sampler: QueuedGridSampler,
    points: list[dict[str, Any]],
    retry_failed: bool = False,
) -> int:
    """Queue every point the study does not hold yet; returns how many were queued.

    Args:
        retry_failed: Also queue again the points whose trials all failed.
    """
    held = point_states(grid_trials(study))
    queued = 0
    for params in points:
        key = grid_key(params)
        state = held.get(key)
        if state is not None and not (retry_failed and state == TrialState.FAIL):
            continue
        if state is not None:
            log.info("retrying the failed grid point %s", key)
        study.add_trial(
            optuna.trial.create_trial(
                state=TrialState.WAITING,
                user_attrs={GRID_KEY_ATTR: key},
                system_attrs={
                    "fixed_params": params,
                    "grid_id": sampler.grid_id(params),
                    "search_space": sampler.search_space,
                },
            )
        )
        held[key] = TrialState.WAITING
        queued += 1
    return queued


def duplicate_of(study: optuna.Study, number: int, key: str) -> int | None:
    """Another trial that runs grid point ``key`` in place of trial ``number``, if any.

    Two workers that restart a study at once may both queue a failed point again (and a
    heartbeat retry may join them). Of the trials of one point, a completed one wins, else the
    lowest-numbered one that is waiting or running, so exactly one of them trains.
    """
    for trial in grid_trials(study, TrialState.COMPLETE, TrialState.RUNNING, TrialState.WAITING):
        if trial.number == number or trial.user_attrs[GRID_KEY_ATTR] != key:
            continue
        if trial.state == TrialState.COMPLETE or trial.number < number:
            return trial.number
    return None


def summarize_study(study: optuna.Study, storage_url: str, monitor: str) -> SweepResult:
    """Each grid point once, by its final state, and the best completed trial."""
    trials = sorted(grid_trials(study), key=lambda t: t.number)
    states = point_states(trials)
    result = SweepResult(
        study_name=study.study_name,
        storage=storage_url,
        monitor=monitor,
        direction=study.direction.name.lower(),
        n_queued=len(states),
    )
    complete: dict[str, FrozenTrial] = {}
    last_failed: dict[str, FrozenTrial] = {}
    for trial in trials:
        key = trial.user_attrs[GRID_KEY_ATTR]
        if trial.state == TrialState.COMPLETE:
            complete.setdefault(key, trial)
        elif trial.state == TrialState.FAIL:
            last_failed[key] = trial
            result.failed_trials.append(trial.number)
    result.failed = {
        t.number: str(t.user_attrs.get("error", KILLED_ERROR))
        for key, t in last_failed.items()
        if states[key] == TrialState.FAIL
    }
    result.completed = sorted(t.number for t in complete.values())
    if complete:
        pick = max if result.direction == "maximize" else min
        best = pick(complete.values(), key=lambda t: float(t.value))  # type: ignore[arg-type]
        result.best_params = dict(best.params)
        result.best_value = float(best.value)  # type: ignore[arg-type]
        result.best_trial = best.number
    return result
