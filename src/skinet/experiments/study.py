"""The Optuna grid sweep: one queued trial per grid point, shared by any number of workers.

How the grid is run exactly once, across workers and restarts:

- Every grid point is built into a run config first; a point that does not validate stops the
  sweep before anything is created or trained.
- The study is created atomically (``create_study(load_if_exists=False)`` either creates it or
  raises ``DuplicatedStudyError``); only the worker that created it queues the grid points
  (``WAITING`` trials), starts the MLflow parent run and records its tracking URI, then sets
  the study attribute ``grid_ready``. Other workers wait for that attribute, refuse to run if
  they would log to another MLflow store, and queue only what is missing: points never queued
  and, unless ``retry_failed`` is off, points whose trials all failed.
- Workers only take queued trials. ``GridSampler`` on its own lets an idle worker re-run a
  point still in progress; it stays the study's sampler so the grid bookkeeping of Optuna
  (grid ids, search space) is that of a grid search. Of two trials of one point (two workers
  re-queued the same failed point) only one trains (see :func:`grid.duplicate_of`).
- Each trial sends a heartbeat to the RDB storage. A trial whose process was killed stops
  beating; after the grace period Optuna marks it ``FAIL`` and
  ``RetryHeartbeatStaleTrialCallback`` queues a copy with the same parameters, which any
  worker (or the restarted sweep) runs. A worker with nothing left to take waits for running
  trials to finish or go stale before it leaves; it records one heartbeat for each running
  trial it waits on, so a trial whose worker died before its first heartbeat goes stale too.
- A trial that raises is recorded ``FAIL`` with the user attribute ``error`` and the sweep
  goes on (``catch=(Exception,)``).
"""

from __future__ import annotations

import logging
import re
import time
import warnings
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import TrialState

from skinet.config.errors import UsageError
from skinet.config.experiment import ExperimentConfig
from skinet.experiments import mlflow_parent
from skinet.experiments.grid import (
    GRID_READY_ATTR,
    PARENT_RUN_ATTR,
    SEARCH_SPACE_ATTR,
    STUDY_FOLDER_ATTR,
    TRACKING_URI_ATTR,
    QueuedGridSampler,
    SweepResult,
    enqueue_grid,
    grid_trials,
    summarize_study,
)
from skinet.experiments.grid_plot import plot_grid
from skinet.experiments.objective import Objective, build_objective, validate_grid
from skinet.experiments.search_space import SearchSpace, build_search_space, grid_points
from skinet.experiments.storage import build_storage, default_storage_url
from skinet.tracking.mlflow_utils import resolve_tracking_uri, sqlite_path

log = logging.getLogger(__name__)

PLOT_FILE = "objective_per_trial.png"


def parent_run_name(cfg: ExperimentConfig) -> str:
    """``optuna_study_{TRAIN_CONFIG.experiment_name}_{monitor}``, the guide's parent run name."""
    return f"optuna_study_{cfg.train.experiment_name}_{cfg.sweep.monitor}"


def default_study_name(cfg: ExperimentConfig) -> str:
    """``{experiment_name}_{monitor}``."""
    return f"{cfg.train.experiment_name}_{cfg.sweep.monitor}"


def tracking_uri_of(cfg: ExperimentConfig) -> str | None:
    """The MLflow store the trials of ``cfg`` log to, normalised (``None`` when MLflow is off)."""
    if not cfg.train.use_mlflow_logger:
        return None
    uri = resolve_tracking_uri(cfg)
    db_path = sqlite_path(uri)
    return f"sqlite:///{db_path}" if db_path is not None else uri.rstrip("/")


def choose_study_folder(output_dir: Path, study_name: str) -> str:
    """The folder of a new study's trials under ``output_dir``: its name, made unique.

    A folder of that name that already holds runs (a study of the same name in another
    storage) is left alone; the new study gets a time-stamped name instead.
    """
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", study_name)
    existing = output_dir / name
    if existing.is_dir() and any(existing.glob("trial_*")):
        name = f"{name}_{datetime.now().strftime('%Y%m%d-%H%M%S-%f')}"
    return name


def _check_tracking_uri(study: optuna.Study, worker_uri: str | None) -> None:
    recorded = study.user_attrs.get(TRACKING_URI_ATTR)
    if recorded is None or worker_uri is None or recorded == worker_uri:
        return
    raise UsageError(
        f"study {study.study_name!r} logs to the MLflow tracking store {recorded} (its parent "
        f"run lives there), but this worker would log to {worker_uri}. Every worker of a study "
        f"must log to the same tracking server: set TRAIN_CONFIG.mlflow_config.tracking_uri "
        f"(or MLFLOW_TRACKING_URI) to {recorded}, or use another --study-name"
    )


def open_study(
    cfg: ExperimentConfig,
    storage: optuna.storages.BaseStorage,
    study_name: str,
    search_space: SearchSpace,
    points: list[dict[str, Any]],
    start_parent: Callable[[], str | None],
    retry_failed: bool = True,
    ready_timeout_s: float = 300.0,
) -> tuple[optuna.Study, str | None]:
    """Create or join the study; the creator queues the grid and starts the parent run.

    Returns:
        The study and the MLflow parent run id (``None`` when MLflow is off).
    """
    sampler = QueuedGridSampler(search_space, seed=0)
    try:
        study = optuna.create_study(
            storage=storage,
            study_name=study_name,
            sampler=sampler,
            direction=cfg.sweep.direction,
            load_if_exists=False,
        )
        created = True
    except optuna.exceptions.DuplicatedStudyError:
        study = optuna.load_study(study_name=study_name, storage=storage, sampler=sampler)
        created = False

    if study.direction.name.lower() != cfg.sweep.direction:
        raise UsageError(
            f"study {study_name!r} was created to {study.direction.name.lower()} but "
            f"SWEEP_CONFIG.direction is {cfg.sweep.direction!r}; use another --study-name"
        )
    worker_uri = tracking_uri_of(cfg)
    if created:
        study.set_user_attr(SEARCH_SPACE_ATTR, search_space)
        study.set_user_attr("monitor", cfg.sweep.monitor)
        study.set_user_attr(
            STUDY_FOLDER_ATTR, choose_study_folder(Path(cfg.train.output_dir), study_name)
        )
        parent_run_id = _start_parent(study, worker_uri, start_parent)
        queued = enqueue_grid(study, sampler, points)
        study.set_user_attr(GRID_READY_ATTR, queued)
        log.info("study %s created: %d grid point(s) queued", study_name, queued)
        return study, parent_run_id

    attrs = _wait_for_grid(study, ready_timeout_s)
    stored_space = attrs.get(SEARCH_SPACE_ATTR)
    if stored_space is not None and stored_space != search_space:
        raise UsageError(
            f"study {study_name!r} was created with the grid {stored_space}, not {search_space}; "
            "resume with the same SWEEP_CONFIG or choose another --study-name"
        )
    _check_tracking_uri(study, worker_uri)
    # Top up points the creator did not queue (a larger --trials, or a creator that died
    # before the grid was ready) and points that failed before this restart.
    added = enqueue_grid(study, sampler, points, retry_failed=retry_failed)
    if added:
        log.info("queued %d grid point(s) in study %s", added, study_name)
    if GRID_READY_ATTR not in attrs:
        study.set_user_attr(GRID_READY_ATTR, added)
    parent_run_id = attrs.get(PARENT_RUN_ATTR)
    if parent_run_id is None:
        parent_run_id = _start_parent(study, worker_uri, start_parent)
    return study, parent_run_id


def _start_parent(
    study: optuna.Study, worker_uri: str | None, start_parent: Callable[[], str | None]
) -> str | None:
    parent_run_id = start_parent()
    if parent_run_id is not None:
        study.set_user_attr(PARENT_RUN_ATTR, parent_run_id)
        study.set_user_attr(TRACKING_URI_ATTR, worker_uri)
    return parent_run_id


def _wait_for_grid(study: optuna.Study, timeout_s: float) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while True:
        attrs = dict(study.user_attrs)
        if GRID_READY_ATTR in attrs or time.monotonic() > deadline:
            if GRID_READY_ATTR not in attrs:
                log.warning("study %s: grid not marked ready; queuing it here", study.study_name)
            return attrs
        time.sleep(0.5)


def _fail_stale_trials(study: optuna.Study) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        optuna.storages.fail_stale_trials(study)


def _record_first_heartbeats(
    storage: optuna.storages.RDBStorage, running: list[optuna.trial.FrozenTrial], seen: set[int]
) -> None:
    """Record one heartbeat for each running trial this worker has not seen before.

    A worker killed after taking a trial and before its heartbeat thread first wrote leaves the
    trial ``RUNNING`` with no heartbeat, and Optuna never counts a trial without one as stale:
    every worker would wait for it for ever. From this heartbeat on its grace period runs; a
    live trial's own worker keeps it fresh, a dead one's goes stale and is retried.
    """
    for trial in running:
        if trial._trial_id not in seen:
            seen.add(trial._trial_id)
            storage.record_heartbeat(trial._trial_id)


def work_on_study(
    study: optuna.Study,
    objective: Objective,
    storage: optuna.storages.RDBStorage,
    poll_s: float = 2.0,
) -> int:
    """Run queued trials until none is waiting or running; returns how many this worker ran.

    ``storage`` is the study's storage, with heartbeats (:func:`build_storage`).
    """
    ran = 0
    seen: set[int] = set()
    while True:
        _fail_stale_trials(study)
        if grid_trials(study, TrialState.WAITING):
            study.optimize(objective, n_trials=1, catch=(Exception,), gc_after_trial=True)
            ran += 1
            continue
        running = grid_trials(study, TrialState.RUNNING)
        if not running:
            return ran
        # Another worker is busy: wait, so a trial whose worker dies is retried here.
        _record_first_heartbeats(storage, running, seen)
        time.sleep(poll_s)


def trial_overrides(cfg: ExperimentConfig, study_dir: Path) -> dict[str, Any]:
    """Overrides of every trial: its run folder goes under the study's, its MLflow store stays."""
    overrides: dict[str, Any] = {"TRAIN_CONFIG.output_dir": str(study_dir)}
    if cfg.train.use_mlflow_logger:
        # The default store lives in output_dir; pin it before output_dir moves.
        overrides["TRAIN_CONFIG.mlflow_config.tracking_uri"] = resolve_tracking_uri(cfg)
    return overrides


def run_sweep(
    cfg: ExperimentConfig,
    n_trials: int | None = None,
    storage_url: str | None = None,
    study_name: str | None = None,
    heartbeat_interval: int = 60,
    grace_period: int | None = None,
    poll_s: float = 2.0,
    run_training_fn: Callable[..., Any] | None = None,
    retry_failed: bool = True,
) -> SweepResult:
    """Run (or join, or resume) the grid sweep of ``SWEEP_CONFIG`` and report the best trial.

    Trial runs go to ``<output_dir>/<study folder>/trial_<n>_...`` (the folder is the study
    name, recorded in the study).

    Args:
        cfg: The config, with ``--monitor``/``--direction`` already applied.
        n_trials: Cap on the grid points queued (the first ``n_trials`` of the product).
        storage_url: Optuna RDB storage; default ``sqlite:///<output_dir>/optuna.db``.
        study_name: Default ``{experiment_name}_{monitor}``.
        heartbeat_interval: Seconds between heartbeats of a running trial.
        grace_period: Seconds without heartbeat before a trial is retried elsewhere.
        poll_s: How often an idle worker checks on trials running elsewhere.
        run_training_fn: Replaces :func:`skinet.training.run.run_training` (tests).
        retry_failed: Queue again, on joining an existing study, the grid points whose trials
            all failed.

    Raises:
        ConfigError: A grid point does not make a valid run config (before anything trains).
        UsageError: The study holds another grid or direction, or logs to another MLflow store.
    """
    search_space = build_search_space(cfg.sweep)
    points = grid_points(search_space)
    if n_trials is not None:
        if n_trials <= 0:
            raise UsageError(f"--trials must be positive, got {n_trials}")
        points = points[:n_trials]
    storage_url = storage_url or default_storage_url(cfg)
    study_name = study_name or default_study_name(cfg)
    output_dir = Path(cfg.train.output_dir)
    validate_grid(cfg, search_space, points, trial_overrides(cfg, output_dir / study_name))
    storage = build_storage(storage_url, heartbeat_interval, grace_period)
    log.info(
        "sweep %s: %d grid point(s) of %d, optimising %s (%s), storage %s",
        study_name,
        len(points),
        len(grid_points(search_space)),
        cfg.sweep.monitor,
        cfg.sweep.direction,
        storage_url,
    )

    def start_parent() -> str | None:
        return mlflow_parent.start_sweep_parent_run(cfg, parent_run_name(cfg), study_name)

    study, parent_run_id = open_study(
        cfg, storage, study_name, search_space, points, start_parent, retry_failed
    )
    study_dir = output_dir / str(study.user_attrs.get(STUDY_FOLDER_ATTR, study_name))
    objective = build_objective(
        cfg, search_space, parent_run_id, run_training_fn, trial_overrides(cfg, study_dir)
    )
    ran = work_on_study(study, objective, storage, poll_s)
    result = summarize_study(study, storage_url, cfg.sweep.monitor)
    result.parent_run_id = parent_run_id
    log.info(
        "this worker ran %d trial(s); %d of %d grid point(s) complete, %d failed",
        ran,
        len(result.completed),
        result.n_queued,
        len(result.failed),
    )
    result.plot_path = plot_grid(study, search_space, cfg.sweep.monitor, study_dir / PLOT_FILE)
    if parent_run_id is not None:
        mlflow_parent.finish_sweep_parent_run(cfg, parent_run_id, result)
    return result
