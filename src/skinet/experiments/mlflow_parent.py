"""The MLflow side of a sweep: its parent run, the best trial, the plot and closed leftovers."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from skinet.config.experiment import ExperimentConfig
from skinet.keys import STUDY_TAG
from skinet.tracking import runs as tracking_runs
from skinet.tracking.mlflow_utils import artifact_location_for, resolve_tracking_uri

if TYPE_CHECKING:
    from skinet.experiments.grid import SweepResult

log = logging.getLogger(__name__)


def experiment_of(cfg: ExperimentConfig) -> str:
    """The MLflow experiment the runs of ``cfg`` go to."""
    return cfg.train.mlflow_config.experiment_name or cfg.train.experiment_name


def start_group_run(
    cfg: ExperimentConfig, run_name: str, tags: dict[str, str], reuse: bool
) -> str | None:
    """A parent run in the experiment of ``cfg`` (``None`` when MLflow logging is off)."""
    if not cfg.train.use_mlflow_logger:
        return None
    uri = resolve_tracking_uri(cfg)
    return tracking_runs.start_parent_run(
        uri,
        experiment_of(cfg),
        run_name,
        tags=tags,
        artifact_location=artifact_location_for(cfg, uri),
        reuse=reuse,
    )


def start_sweep_parent_run(cfg: ExperimentConfig, run_name: str, study_name: str) -> str | None:
    """The sweep's parent run, reopened if a run of this name and study exists."""
    tags = {STUDY_TAG: study_name, "skinet.monitor": cfg.sweep.monitor}
    run_id = start_group_run(cfg, run_name, tags, reuse=True)
    if run_id is not None:
        uri = resolve_tracking_uri(cfg)
        _log_params_or_tags(
            uri,
            run_id,
            {"monitor": cfg.sweep.monitor, "direction": cfg.sweep.direction, "study": study_name},
        )
    return run_id


def finish_sweep_parent_run(cfg: ExperimentConfig, run_id: str, result: SweepResult) -> None:
    """Log the best trial (``best_*`` params, ``best_{monitor}``) and the plot; close the run."""
    uri = resolve_tracking_uri(cfg)
    for number in result.failed_trials:
        # A killed worker leaves its child run RUNNING; its trial is FAIL (and was retried).
        tracking_runs.terminate_open_child_runs(uri, run_id, f"trial_{number}_")
    metrics = {"n_complete": float(len(result.completed)), "n_failed": float(len(result.failed))}
    if result.best_params is not None and result.best_value is not None:
        params = {f"best_{k}": v for k, v in result.best_params.items()}
        params["best_trial"] = result.best_trial
        _log_params_or_tags(uri, run_id, params)
        metrics[f"best_{result.monitor}"] = result.best_value
    tracking_runs.log_metrics(uri, run_id, metrics)
    if result.plot_path is not None and result.plot_path.is_file():
        tracking_runs.log_artifact(uri, run_id, result.plot_path, "plots")
    tracking_runs.finish_run(uri, run_id, "FINISHED" if result.completed else "FAILED")


def _log_params_or_tags(uri: str, run_id: str, params: dict[str, object]) -> None:
    # MLflow refuses to change a logged param; a resumed sweep with a new best keeps the old
    # params and records the new values as tags.
    try:
        tracking_runs.log_params(uri, run_id, params)
    except Exception as error:  # noqa: BLE001 - MlflowException: param already logged
        log.warning("could not log params %s to run %s (%s); setting tags", params, run_id, error)
        tracking_runs.set_tags(uri, run_id, {k: str(v) for k, v in params.items()})
