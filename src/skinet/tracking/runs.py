"""Parent runs of sweeps, seed studies and ablations: create, find, log to and finish them.

Everything goes through an explicit ``MlflowClient`` on a given tracking URI, never the fluent
``mlflow.start_run`` stack, so a parent run held open here cannot leak into the child runs that
Lightning's ``MLFlowLogger`` opens in the same process.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from skinet.tracking.mlflow_utils import ensure_experiment

# mlflow.utils.mlflow_tags.MLFLOW_PARENT_RUN_ID / MLFLOW_RUN_NAME, spelled out so importing this
# module stays cheap; tests check them against MLflow's constants.
PARENT_RUN_ID_TAG = "mlflow.parentRunId"
RUN_NAME_TAG = "mlflow.runName"
# MLflow's limit on param values (mlflow.utils.validation.MAX_PARAM_VAL_LENGTH).
_MAX_PARAM_LENGTH = 6000


def _client(uri: str) -> Any:
    from mlflow.tracking import MlflowClient

    return MlflowClient(uri)


def _quote(value: str) -> str:
    return value.replace("\\", "\\\\").replace("'", "\\'")


def find_runs(
    uri: str,
    experiment_id: str,
    run_name: str | None = None,
    tags: Mapping[str, str] | None = None,
) -> list[Any]:
    """Runs of ``experiment_id`` with this name and these tags, oldest first."""
    clauses = [f"attributes.run_name = '{_quote(run_name)}'"] if run_name is not None else []
    clauses += [f"tags.`{key}` = '{_quote(value)}'" for key, value in (tags or {}).items()]
    return list(
        _client(uri).search_runs(
            [experiment_id],
            filter_string=" and ".join(clauses),
            order_by=["attributes.start_time ASC"],
            max_results=1000,
        )
    )


def start_parent_run(
    uri: str,
    experiment_name: str,
    run_name: str,
    tags: Mapping[str, str] | None = None,
    artifact_location: str | None = None,
    reuse: bool = True,
) -> str:
    """The id of an open parent run named ``run_name`` carrying ``tags``.

    Args:
        uri: Tracking URI.
        experiment_name: Experiment to create the run in (created if missing).
        run_name: The run's name.
        tags: Tags identifying the run (e.g. the Optuna study); they are also matched when
            looking for an existing run.
        artifact_location: Artifact root used if the experiment has to be created.
        reuse: Reopen the oldest run with this name and tags instead of creating another
            (sweep workers and resumed sweeps share one parent run).
    """
    experiment_id = ensure_experiment(uri, experiment_name, artifact_location)
    client = _client(uri)
    if reuse:
        existing = find_runs(uri, experiment_id, run_name, tags)
        if existing:
            run_id = str(existing[0].info.run_id)
            if existing[0].info.status != "RUNNING":
                client.update_run(run_id, status="RUNNING")
            return run_id
    run = client.create_run(experiment_id, run_name=run_name, tags=dict(tags or {}))
    return str(run.info.run_id)


def finish_run(uri: str, run_id: str, status: str = "FINISHED") -> None:
    """Close a run with ``status`` (``FINISHED``, ``FAILED`` or ``KILLED``)."""
    _client(uri).set_terminated(run_id, status)


def reopen_run(uri: str, run_id: str) -> str | None:
    """Set an existing run back to ``RUNNING`` and return the status it had before.

    A run found ``RUNNING`` belongs to an attempt that died without closing it (SIGKILL, a lost
    machine): it is closed as ``KILLED`` first, which records when the new attempt took over,
    and ``"KILLED"`` is returned. ``None`` when the store no longer has the run.
    """
    from mlflow.exceptions import MlflowException

    client = _client(uri)
    try:
        run = client.get_run(run_id)
    except MlflowException:
        return None
    if run.info.lifecycle_stage != "active":
        return None
    status = str(run.info.status)
    if status == "RUNNING":
        client.set_terminated(run_id, "KILLED")
        status = "KILLED"
    client.update_run(run_id, status="RUNNING")
    return status


def log_params(uri: str, run_id: str, params: Mapping[str, Any]) -> None:
    """Log parameters; logging a key again with the same value is allowed, a new value is not."""
    from mlflow.entities import Param

    batch = [Param(str(k), str(v)[:_MAX_PARAM_LENGTH]) for k, v in params.items()]
    if batch:
        _client(uri).log_batch(run_id, params=batch)


def log_metrics(uri: str, run_id: str, metrics: Mapping[str, float], step: int = 0) -> None:
    """Log finite metric values (NaN and infinities are skipped)."""
    import time

    from mlflow.entities import Metric

    now = int(time.time() * 1000)
    batch = [
        Metric(str(k), float(v), now, step) for k, v in metrics.items() if math.isfinite(float(v))
    ]
    if batch:
        _client(uri).log_batch(run_id, metrics=batch)


def set_tags(uri: str, run_id: str, tags: Mapping[str, str]) -> None:
    """Set tags on a run."""
    client = _client(uri)
    for key, value in tags.items():
        client.set_tag(run_id, key, value)


def log_artifact(uri: str, run_id: str, path: str | Path, artifact_path: str | None = None) -> None:
    """Upload a local file to the run's artifacts."""
    _client(uri).log_artifact(run_id, str(path), artifact_path)


def log_text(uri: str, run_id: str, text: str, artifact_file: str) -> None:
    """Write ``text`` as the artifact ``artifact_file``."""
    _client(uri).log_text(run_id, text, artifact_file)


def log_table(uri: str, run_id: str, rows: Sequence[Mapping[str, Any]], artifact_file: str) -> None:
    """Log rows of a table as a JSON table artifact that the MLflow UI shows as a grid."""
    columns: list[str] = []
    for row in rows:
        columns += [key for key in row if key not in columns]
    data = {column: [row.get(column) for row in rows] for column in columns}
    _client(uri).log_table(run_id, data=data, artifact_file=artifact_file)


def find_child_runs(uri: str, parent_run_id: str) -> list[Any]:
    """The runs nested under ``parent_run_id`` (tag ``mlflow.parentRunId``), oldest first."""
    client = _client(uri)
    parent = client.get_run(parent_run_id)
    return find_runs(uri, parent.info.experiment_id, tags={PARENT_RUN_ID_TAG: parent_run_id})


def terminate_open_child_runs(
    uri: str, parent_run_id: str, name_prefix: str, status: str = "KILLED"
) -> list[str]:
    """Close child runs still ``RUNNING`` whose name starts with ``name_prefix``.

    A process killed mid-trial leaves its run open; a resumed sweep closes it so the UI does
    not show it as running forever. Returns the ids of the runs it closed.
    """
    closed = []
    for run in find_child_runs(uri, parent_run_id):
        if run.info.status == "RUNNING" and str(run.info.run_name).startswith(name_prefix):
            finish_run(uri, run.info.run_id, status)
            closed.append(str(run.info.run_id))
    return closed
