"""The Optuna grid sweep: one queued trial per grid point, shared by any number of workers.

How the grid is run exactly once, across workers and restarts:

- The study is created atomically (``create_study(load_if_exists=False)`` either creates it or
  raises ``DuplicatedStudyError``); only the worker that created it queues the grid points
  (``WAITING`` trials) and the MLflow parent run, then sets the study attribute
  ``grid_ready``. Other workers wait for that attribute instead of queueing again.
- Workers only take queued trials. ``GridSampler`` on its own lets an idle worker re-run a
  point still in progress (docs/development.md); it stays the study's sampler so the grid
  bookkeeping of Optuna (grid ids, search space) is that of a grid search.
- Each trial sends a heartbeat to the RDB storage. A trial whose process was killed stops
  beating; after the grace period Optuna marks it ``FAIL`` and
  ``RetryHeartbeatStaleTrialCallback`` queues a copy with the same parameters, which any
  worker (or the restarted sweep) runs. A worker with nothing left to take waits for running
  trials to finish or go stale before it leaves.
- A trial that raises is recorded ``FAIL`` with the user attribute ``error`` and the sweep
  goes on (``catch=(Exception,)``).
"""

from __future__ import annotations

import logging
import math
import os
import time
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from skinet.config import ExperimentConfig
from skinet.keys import HyperparamKey
from skinet.sweep.search_space import (
    SearchSpace,
    build_search_space,
    build_trial_config,
    grid_key,
    grid_points,
    trial_run_name,
)

log = logging.getLogger(__name__)

GRID_KEY_ATTR = "grid_key"
"""Trial user attribute marking a queued grid point (its canonical parameters)."""
GRID_READY_ATTR = "grid_ready"
"""Study user attribute set once every grid point is queued (the number queued)."""
SEARCH_SPACE_ATTR = "search_space"
"""Study user attribute holding the grid the study was created with."""
PARENT_RUN_ATTR = "mlflow_parent_run_id"
"""Study user attribute holding the MLflow parent run id."""
STUDY_TAG = "skinet.optuna_study"
"""MLflow tag of the parent run naming its Optuna study."""
MONITOR_ENV, DIRECTION_ENV = "SWEEP_MONITOR", "SWEEP_DIRECTION"
_MAX_ERROR_LENGTH = 2000

Objective = Callable[[optuna.Trial], float]


@dataclass
class SweepResult:
    """What a sweep worker leaves behind once no queued trial remains."""

    study_name: str
    storage: str
    monitor: str
    direction: str
    n_queued: int
    completed: list[int] = field(default_factory=list)
    failed: dict[int, str] = field(default_factory=dict)
    best_params: dict[str, Any] | None = None
    best_value: float | None = None
    best_trial: int | None = None
    parent_run_id: str | None = None
    plot_path: Path | None = None


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


def objective_overrides(
    monitor: str | None = None,
    direction: str | None = None,
    environ: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """Config overrides for the objective: a CLI flag wins over its environment variable.

    ``SWEEP_CONFIG.monitor``/``direction`` of the YAML stay in force when neither is given.
    """
    environ = os.environ if environ is None else environ
    overrides = {}
    chosen_monitor = monitor or environ.get(MONITOR_ENV) or None
    chosen_direction = direction or environ.get(DIRECTION_ENV) or None
    if chosen_monitor:
        overrides["SWEEP_CONFIG.monitor"] = chosen_monitor
    if chosen_direction:
        overrides["SWEEP_CONFIG.direction"] = chosen_direction
    return overrides


def parent_run_name(cfg: ExperimentConfig) -> str:
    """``optuna_study_{TRAIN_CONFIG.experiment_name}_{monitor}``, the guide's parent run name."""
    return f"optuna_study_{cfg.train.experiment_name}_{cfg.sweep.monitor}"


def default_study_name(cfg: ExperimentConfig) -> str:
    """``{experiment_name}_{monitor}``."""
    return f"{cfg.train.experiment_name}_{cfg.sweep.monitor}"


def default_storage_url(cfg: ExperimentConfig) -> str:
    """``sqlite:///<output_dir>/optuna.db``."""
    return f"sqlite:///{Path(cfg.train.output_dir).resolve() / 'optuna.db'}"


def build_storage(
    url: str, heartbeat_interval: int = 60, grace_period: int | None = None
) -> optuna.storages.RDBStorage:
    """An RDB storage with heartbeats; stale trials are re-queued with the same parameters.

    Args:
        url: SQLAlchemy URL (``sqlite:///...``, ``postgresql://...``, ``mysql://...``).
        heartbeat_interval: Seconds between heartbeats of a running trial.
        grace_period: Seconds without heartbeat after which a trial counts as dead
            (default ``2 * heartbeat_interval``).
    """
    if "://" not in url:
        raise ValueError(
            f"--storage expects an RDB URL such as sqlite:///path/optuna.db, got {url!r}"
        )
    engine_kwargs: dict[str, Any] = {}
    if url.startswith("sqlite"):
        # Several worker processes write to one file: wait for the lock instead of failing.
        engine_kwargs["connect_args"] = {"timeout": 60}
        db_file = url.split(":///", 1)[-1]
        if db_file and db_file != ":memory:":
            Path(db_file).parent.mkdir(parents=True, exist_ok=True)
    last_error: Exception | None = None
    for attempt in range(5):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                return optuna.storages.RDBStorage(
                    url,
                    engine_kwargs=engine_kwargs,
                    heartbeat_interval=heartbeat_interval,
                    grace_period=grace_period,
                    heartbeat_stale_trial_callback=optuna.storages.RetryHeartbeatStaleTrialCallback(
                        max_retry=3
                    ),
                )
        except Exception as error:  # noqa: BLE001 - concurrent table creation by another worker
            last_error = error
            time.sleep(0.5 * (attempt + 1))
    raise ValueError(f"cannot open the Optuna storage {url}: {last_error}") from last_error


def enqueue_grid(
    study: optuna.Study, sampler: QueuedGridSampler, points: list[dict[str, Any]]
) -> int:
    """Queue every point of ``points`` that the study does not hold yet; returns how many."""
    held = {t.user_attrs.get(GRID_KEY_ATTR) for t in study.get_trials(deepcopy=False)}
    queued = 0
    for params in points:
        key = grid_key(params)
        if key in held:
            continue
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
        held.add(key)
        queued += 1
    return queued


def open_study(
    cfg: ExperimentConfig,
    storage: optuna.storages.BaseStorage,
    study_name: str,
    search_space: SearchSpace,
    points: list[dict[str, Any]],
    start_parent: Callable[[], str | None],
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
        raise ValueError(
            f"study {study_name!r} was created to {study.direction.name.lower()} but "
            f"SWEEP_CONFIG.direction is {cfg.sweep.direction!r}; use another --study-name"
        )
    if created:
        study.set_user_attr(SEARCH_SPACE_ATTR, search_space)
        parent_run_id = start_parent()
        if parent_run_id is not None:
            study.set_user_attr(PARENT_RUN_ATTR, parent_run_id)
        queued = enqueue_grid(study, sampler, points)
        study.set_user_attr(GRID_READY_ATTR, queued)
        log.info("study %s created: %d grid point(s) queued", study_name, queued)
        return study, parent_run_id

    attrs = _wait_for_grid(study, ready_timeout_s)
    stored_space = attrs.get(SEARCH_SPACE_ATTR)
    if stored_space is not None and stored_space != search_space:
        raise ValueError(
            f"study {study_name!r} was created with the grid {stored_space}, not {search_space}; "
            "resume with the same SWEEP_CONFIG or choose another --study-name"
        )
    # Top up points the creator did not queue (a larger --trials, or a creator that died
    # before the grid was ready).
    added = enqueue_grid(study, sampler, points)
    if added:
        log.info("queued %d more grid point(s) in study %s", added, study_name)
    if GRID_READY_ATTR not in attrs:
        study.set_user_attr(GRID_READY_ATTR, added)
    parent_run_id = attrs.get(PARENT_RUN_ATTR)
    if parent_run_id is None:
        parent_run_id = start_parent()
        if parent_run_id is not None:
            study.set_user_attr(PARENT_RUN_ATTR, parent_run_id)
    return study, parent_run_id


def _wait_for_grid(study: optuna.Study, timeout_s: float) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while True:
        attrs = dict(study.user_attrs)
        if GRID_READY_ATTR in attrs or time.monotonic() > deadline:
            if GRID_READY_ATTR not in attrs:
                log.warning("study %s: grid not marked ready; queuing it here", study.study_name)
            return attrs
        time.sleep(0.5)


def build_objective(
    cfg: ExperimentConfig,
    search_space: SearchSpace,
    parent_run_id: str | None = None,
    run_training_fn: Callable[..., Any] | None = None,
) -> Objective:
    """The Optuna objective: train one grid point and return its monitored metric.

    Every :class:`HyperparamKey` member is read from the trial, so a new member needs only a
    ``SWEEP_CONFIG`` list. ``lr`` is rescaled to the trial's batch size against the smallest
    batch of the sweep. Trials that were not queued (a worker raced another for the last
    point) are pruned without training.

    Args:
        cfg: The base config (objective overrides already applied).
        search_space: From :func:`build_search_space`.
        parent_run_id: MLflow run the trials are nested under.
        run_training_fn: Replaces :func:`skinet.training.run.run_training` (tests).
    """
    if run_training_fn is None:
        from skinet.training.run import run_training

        run_training_fn = run_training
    monitor = cfg.sweep.monitor
    min_batch_size = min(int(b) for b in search_space[HyperparamKey.BATCH_SIZE.value])

    def objective(trial: optuna.Trial) -> float:
        if GRID_KEY_ATTR not in trial.user_attrs:
            raise optuna.TrialPruned("not a queued grid point; every point is already taken")
        params = {
            key.value: trial.suggest_categorical(key.value, search_space[key.value])
            for key in HyperparamKey
        }
        run_name = trial_run_name(trial.number, params)
        try:
            trial_cfg = build_trial_config(cfg, params, min_batch_size)
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


def _queued(study: optuna.Study, *states: TrialState) -> list[FrozenTrial]:
    return [
        t
        for t in study.get_trials(deepcopy=False, states=states or None)
        if GRID_KEY_ATTR in t.user_attrs
    ]


def _fail_stale_trials(study: optuna.Study) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        optuna.storages.fail_stale_trials(study)


def work_on_study(study: optuna.Study, objective: Objective, poll_s: float = 2.0) -> int:
    """Run queued trials until none is waiting or running; returns how many this worker ran."""
    ran = 0
    while True:
        _fail_stale_trials(study)
        if _queued(study, TrialState.WAITING):
            study.optimize(objective, n_trials=1, catch=(Exception,), gc_after_trial=True)
            ran += 1
            continue
        if not _queued(study, TrialState.RUNNING):
            return ran
        # Another worker is busy: wait, so a trial whose worker dies is retried here.
        time.sleep(poll_s)


def summarize_study(study: optuna.Study, n_queued: int, storage_url: str) -> SweepResult:
    """Completed and failed grid trials and the best one."""
    trials = study.get_trials(deepcopy=False)
    grid_trials = [t for t in trials if GRID_KEY_ATTR in t.user_attrs]
    complete = [t for t in grid_trials if t.state == TrialState.COMPLETE]
    result = SweepResult(
        study_name=study.study_name,
        storage=storage_url,
        monitor=str(study.user_attrs.get("monitor", "")),
        direction=study.direction.name.lower(),
        n_queued=n_queued,
        completed=[t.number for t in complete],
        failed={
            t.number: str(t.user_attrs.get("error", "killed (heartbeat stopped)"))
            for t in grid_trials
            if t.state == TrialState.FAIL
        },
    )
    if complete:
        pick = max if result.direction == "maximize" else min
        best = pick(complete, key=lambda t: float(t.value))  # type: ignore[arg-type]
        result.best_params = dict(best.params)
        result.best_value = float(best.value)  # type: ignore[arg-type]
        result.best_trial = best.number
    return result


def plot_objective(study: optuna.Study, monitor: str, path: Path) -> Path:
    """A PNG of the objective of every grid trial, with failed ones and the best so far."""
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    trials = sorted(
        (t for t in study.get_trials(deepcopy=False) if GRID_KEY_ATTR in t.user_attrs),
        key=lambda t: t.number,
    )
    done = [t for t in trials if t.state == TrialState.COMPLETE]
    failed = [t for t in trials if t.state == TrialState.FAIL]
    fig = Figure(figsize=(7, 4), dpi=110)
    ax = fig.add_subplot()
    xs = [t.number for t in done]
    ys = [float(t.value) for t in done]  # type: ignore[arg-type]
    ax.plot(xs, ys, "o", color="tab:blue", label="complete")
    if ys:
        pick = max if study.direction.name == "MAXIMIZE" else min
        running, best_so_far = [], ys[0]
        for y in ys:
            best_so_far = pick(best_so_far, y)
            running.append(best_so_far)
        ax.step(xs, running, where="post", color="tab:green", label="best so far")
        best_index = ys.index(pick(ys))
        ax.annotate(
            f"best: {ys[best_index]:.4f}",
            (xs[best_index], ys[best_index]),
            textcoords="offset points",
            xytext=(8, -14),
        )
    if failed:
        floor = min(ys) if ys else 0.0
        ax.plot(
            [t.number for t in failed],
            [floor] * len(failed),
            "x",
            color="tab:red",
            markersize=9,
            label="failed (no value)",
        )
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.margins(x=0.08, y=0.15)
    ax.set_xlabel("trial")
    ax.set_ylabel(monitor)
    ax.set_title(f"Optuna grid sweep: {study.study_name}")
    ax.grid(alpha=0.3)
    ax.legend(loc="best")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    return path


def run_sweep(
    cfg: ExperimentConfig,
    n_trials: int | None = None,
    storage_url: str | None = None,
    study_name: str | None = None,
    heartbeat_interval: int = 60,
    grace_period: int | None = None,
    poll_s: float = 2.0,
    run_training_fn: Callable[..., Any] | None = None,
) -> SweepResult:
    """Run (or join, or resume) the grid sweep of ``SWEEP_CONFIG`` and report the best trial.

    Args:
        cfg: The config, with ``--monitor``/``--direction`` already applied.
        n_trials: Cap on the grid points queued (the first ``n_trials`` of the product).
        storage_url: Optuna RDB storage; default ``sqlite:///<output_dir>/optuna.db``.
        study_name: Default ``{experiment_name}_{monitor}``.
        heartbeat_interval: Seconds between heartbeats of a running trial.
        grace_period: Seconds without heartbeat before a trial is retried elsewhere.
        poll_s: How often an idle worker checks on trials running elsewhere.
        run_training_fn: Replaces :func:`skinet.training.run.run_training` (tests).
    """
    from skinet.sweep import mlflow_parent

    search_space = build_search_space(cfg.sweep)
    points = grid_points(search_space)
    if n_trials is not None:
        if n_trials <= 0:
            raise ValueError(f"--trials must be positive, got {n_trials}")
        points = points[:n_trials]
    storage_url = storage_url or default_storage_url(cfg)
    study_name = study_name or default_study_name(cfg)
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

    study, parent_run_id = open_study(cfg, storage, study_name, search_space, points, start_parent)
    if study.user_attrs.get("monitor") is None:
        study.set_user_attr("monitor", cfg.sweep.monitor)
    objective = build_objective(cfg, search_space, parent_run_id, run_training_fn)
    ran = work_on_study(study, objective, poll_s)
    n_queued = len({t.user_attrs[GRID_KEY_ATTR] for t in _queued(study)})
    result = summarize_study(study, n_queued, storage_url)
    result.monitor = cfg.sweep.monitor
    result.parent_run_id = parent_run_id
    log.info(
        "this worker ran %d trial(s); %d complete, %d failed in the study",
        ran,
        len(result.completed),
        len(result.failed),
    )

    plot_dir = Path(cfg.train.output_dir) / study_name
    result.plot_path = plot_objective(
        study, cfg.sweep.monitor, plot_dir / "objective_per_trial.png"
    )
    if parent_run_id is not None:
        mlflow_parent.finish_sweep_parent_run(cfg, parent_run_id, result)
    return result
