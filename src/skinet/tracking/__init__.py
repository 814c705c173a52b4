"""MLflow tracking: store URIs, run naming, failed runs and local server helpers."""

from skinet.tracking.mlflow_utils import (
    TrackingError,
    artifact_location_for,
    ensure_experiment,
    make_run_name,
    mark_run_failed,
    prepare_sqlite_store,
    resolve_tracking_uri,
    sqlite_path,
)
from skinet.tracking.runs import reopen_run
from skinet.tracking.server import (
    LocalServer,
    check_tracking_server,
    find_free_port,
    start_local_server,
)

__all__ = [
    "LocalServer",
    "TrackingError",
    "artifact_location_for",
    "check_tracking_server",
    "ensure_experiment",
    "find_free_port",
    "make_run_name",
    "mark_run_failed",
    "prepare_sqlite_store",
    "reopen_run",
    "resolve_tracking_uri",
    "sqlite_path",
    "start_local_server",
]
