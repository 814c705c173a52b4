"""Where MLflow runs go, what they are called, and how failed runs are recorded."""

from __future__ import annotations

import logging
import os
import secrets
import sqlite3
import time
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlparse

if TYPE_CHECKING:
    from skinet.config.experiment import ExperimentConfig

log = logging.getLogger(__name__)

DEFAULT_DB_NAME = "mlflow.db"
DEFAULT_ARTIFACTS_DIR = "mlartifacts"
# MLflow's limit on tag values (mlflow.utils.validation.MAX_TAG_VAL_LENGTH).
_MAX_TAG_LENGTH = 8000


class TrackingError(RuntimeError):
    """The MLflow tracking store cannot be used (server down, bad URI)."""


def resolve_tracking_uri(cfg: ExperimentConfig, run_dir_root: Path | None = None) -> str:
    """The MLflow tracking URI of a run.

    Precedence: ``TRAIN_CONFIG.mlflow_config.tracking_uri`` (used unchanged, e.g.
    ``postgresql://...``), then the ``MLFLOW_TRACKING_URI`` environment variable (set by
    ``on_start_*.sh`` to the server they start), then an embedded SQLite store
    ``sqlite:///<run_dir_root>/mlflow.db`` that needs no server.

    Args:
        cfg: The experiment config.
        run_dir_root: Folder of the default store; ``None`` uses ``TRAIN_CONFIG.output_dir``.
    """
    explicit = cfg.train.mlflow_config.tracking_uri or os.environ.get("MLFLOW_TRACKING_URI")
    if explicit:
        return explicit
    root = _output_root(cfg, run_dir_root)
    return f"sqlite:///{root / DEFAULT_DB_NAME}"


def artifact_location_for(
    cfg: ExperimentConfig, tracking_uri: str | None = None, run_dir_root: Path | None = None
) -> str | None:
    """Artifact root for a new experiment, or ``None`` to let the store or server decide.

    A database store without an explicit location would put artifacts in ``./mlruns`` of
    whatever directory training starts in; this pins them next to the database instead
    (``<db folder>/mlartifacts`` for SQLite, ``<output_dir>/mlartifacts`` for other databases).
    Servers (``http(s)://``) and file stores manage their own artifacts.
    """
    configured = cfg.train.mlflow_config.artifact_location
    if configured:
        return configured if urlparse(configured).scheme else Path(configured).resolve().as_uri()
    uri = tracking_uri or resolve_tracking_uri(cfg, run_dir_root)
    scheme = urlparse(uri).scheme.split("+")[0]
    if scheme == "sqlite":
        db_path = sqlite_path(uri)
        folder = db_path.parent if db_path is not None else _output_root(cfg, run_dir_root)
        return (folder / DEFAULT_ARTIFACTS_DIR).as_uri()
    if scheme in ("postgresql", "mysql", "mssql"):
        return (_output_root(cfg, run_dir_root) / DEFAULT_ARTIFACTS_DIR).as_uri()
    return None


def sqlite_path(uri: str) -> Path | None:
    """The database file of a ``sqlite:///`` URI (``None`` for in-memory or other URIs)."""
    if not uri.startswith("sqlite:///"):
        return None
    path = uri.removeprefix("sqlite:///")
    if not path or path == ":memory:":
        return None
    # sqlite:////abs/path keeps its leading slash; sqlite:///rel/path is relative.
    return Path(path).resolve()


def make_run_name(experiment_name: str, seed: int) -> str:
    """``{experiment_name}_seed{seed}_{timestamp}``, the guide's run name, unique per call.

    The timestamp is ``YYYYmmdd-HHMMSS-mmm`` (milliseconds) followed by 6 random hex digits, so
    runs started in the same second (or millisecond) get different names and run folders.
    """
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S-%f")[:-3]
    return f"{experiment_name}_seed{seed}_{stamp}-{secrets.token_hex(3)}"


_PREPARED_STORES: set[str] = set()


def prepare_sqlite_store(uri: str) -> None:
    """Create and migrate an embedded SQLite store once, under a file lock beside it.

    MLflow creates the schema of a new ``sqlite:///`` file on first use; two processes doing so
    at the same moment race on its migrations (``duplicate column name``, alembic errors). The
    lock makes the first process build the schema while the others wait and then find it.

    A new store is built under a temporary name in the same folder and renamed into place once
    MLflow's migrations finished: a full disk or a file-size limit meanwhile leaves no half-built
    ``mlflow.db`` that every later run would fail on. Other URIs are left alone.

    Raises:
        TrackingError: The store could not be created, or an existing one cannot be opened
            (the message names the file and what to do).
    """
    db_path = sqlite_path(uri)
    if db_path is None or uri in _PREPARED_STORES:
        return
    from filelock import FileLock

    db_path.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(db_path) + ".lock"), quiet_store_errors():
        if db_path.is_file() and db_path.stat().st_size > 0:
            _open_store(uri, db_path)
        else:
            _build_store(db_path)
    _PREPARED_STORES.add(uri)


def _open_store(uri: str, db_path: Path) -> None:
    from mlflow.tracking import MlflowClient

    try:
        MlflowClient(uri).search_experiments(max_results=1)
    except Exception as error:  # noqa: BLE001 - SQLAlchemy, alembic and MLflow errors alike
        runs = _count_runs(db_path)
        holds = (
            "it holds no MLflow run, so delete it and run again"
            if not runs
            else f"it holds {runs} MLflow run(s): keep a copy before you delete it"
        )
        raise TrackingError(
            f"the MLflow store {db_path} cannot be opened ({first_line(error)}). If a run that "
            f"could not finish creating it (a full disk, a file-size limit) left it half-built, "
            f"{holds}; or give another store with TRAIN_CONFIG.mlflow_config.tracking_uri"
        ) from None


def _build_store(db_path: Path) -> None:
    from mlflow.tracking import MlflowClient

    temporary = db_path.with_name(f".{db_path.name}.{secrets.token_hex(4)}.partial")
    try:
        MlflowClient(f"sqlite:///{temporary}").search_experiments(max_results=1)
        os.replace(temporary, db_path)
    except Exception as error:  # noqa: BLE001 - SQLAlchemy, alembic and MLflow errors alike
        reason = first_line(getattr(error, "orig", None) or error)
        raise TrackingError(
            f"could not create the MLflow store {db_path} ({reason}); nothing was left in its "
            "place. Free space there (or raise the file-size limit, `ulimit -f`) and run again, "
            "or give another store with TRAIN_CONFIG.mlflow_config.tracking_uri"
        ) from None
    finally:
        for leftover in (temporary, temporary.with_name(temporary.name + "-journal")):
            leftover.unlink(missing_ok=True)


def _count_runs(db_path: Path) -> int | None:
    """How many runs the SQLite store ``db_path`` holds (``None``: it has no readable table)."""
    try:
        connection = sqlite3.connect(f"{db_path.as_uri()}?mode=ro", uri=True)
        try:
            return int(connection.execute("SELECT count(*) FROM runs").fetchone()[0])
        finally:
            connection.close()
    except sqlite3.Error:
        return None


STORE_LOGGERS = ("mlflow.store.db.utils", "mlflow.utils.async_logging.async_logging_queue")
"""MLflow's loggers that print a store error with its SQL statement, parameters and traceback;
the error is raised (or reported) again where SkiNet says what it means."""


class OneLineStoreErrors(logging.Filter):
    """Shorten a record of :data:`STORE_LOGGERS` to one line (``database or disk is full``)."""

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        text = first_line(getattr(error, "orig", None) or error) if error else None
        message = record.getMessage().strip().splitlines()
        record.msg = f"MLflow store: {text}" if text else (message or [""])[0][:300]
        record.args, record.exc_info, record.exc_text = None, None, None
        return True


def shorten_store_errors() -> None:
    """Have MLflow's store errors printed in one line each (once per process)."""
    for name in STORE_LOGGERS:
        store_log = logging.getLogger(name)
        if not any(isinstance(f, OneLineStoreErrors) for f in store_log.filters):
            store_log.addFilter(OneLineStoreErrors())


def ensure_experiment(uri: str, name: str, artifact_location: str | None = None) -> str:
    """Return the id of experiment ``name``, creating (or restoring a deleted) one.

    ``artifact_location`` only applies when the experiment is created. A new embedded SQLite
    store is created first under a lock (:func:`prepare_sqlite_store`).
    """
    from mlflow.exceptions import MlflowException
    from mlflow.tracking import MlflowClient

    shorten_store_errors()
    prepare_sqlite_store(uri)
    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name(name)
    if experiment is not None:
        if experiment.lifecycle_stage == "deleted":
            client.restore_experiment(experiment.experiment_id)
        return str(experiment.experiment_id)
    try:
        return str(client.create_experiment(name, artifact_location=artifact_location))
    except MlflowException:
        # Another sweep worker may have created it between the lookup and the create.
        experiment = client.get_experiment_by_name(name)
        if experiment is None:
            raise
        return str(experiment.experiment_id)


def mark_run_failed(run_id: str, uri: str, error: BaseException) -> bool:
    """Record ``error`` on run ``run_id`` and set its status to ``FAILED``.

    The short error (``Type: message``) goes into the tag ``error``, the full traceback into
    the artifact ``error.txt``. Meant for exception handlers, so it never raises: what the
    store refuses is reported in one warning line and the original error stays visible.

    An embedded SQLite store on a full disk refuses even the status (SQLite needs room for its
    journal); the status is then set in place, without a journal file (:func:`_fail_in_place`).

    Returns:
        Whether the run's status is ``FAILED`` in the store.
    """
    from mlflow.tracking import MlflowClient

    client = MlflowClient(uri)
    summary = f"{type(error).__name__}: {error}"
    details = "".join(traceback.format_exception(error))
    steps = (  # the status first: on a full disk the artifact may fail where the row does not
        ("status", lambda: client.set_terminated(run_id, "FAILED")),
        ("error tag", lambda: client.set_tag(run_id, "error", summary[:_MAX_TAG_LENGTH])),
        ("traceback", lambda: client.log_text(run_id, details, "error.txt")),
    )
    refused: dict[str, str] = {}
    with quiet_store_errors():
        for what, step in steps:
            try:
                step()
            except Exception as exc:  # noqa: BLE001 - must not mask the training error
                refused[what] = first_line(exc)
        marked = "status" not in refused or _fail_in_place(uri, run_id)
    if marked:
        refused.pop("status", None)
    if refused:
        reason = next(iter(refused.values()))
        log.warning(
            "could not record the %s of failed MLflow run %s: %s",
            " and ".join(refused),
            run_id,
            reason,
        )
    return marked


def first_line(error: BaseException | str) -> str:
    """The first line of ``error``, at most 200 characters: a store error can carry the whole
    SQL statement and its parameters."""
    return (str(error).strip().splitlines() or [type(error).__name__])[0][:200]


@contextmanager
def quiet_store_errors() -> Iterator[None]:
    """Silence MLflow's SQL store, which logs every statement it could not run with its
    traceback at ``ERROR`` (dozens of lines each on a full disk); callers report in one line."""
    store_log = logging.getLogger("mlflow.store.db.utils")
    previous = store_log.level
    store_log.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        store_log.setLevel(previous)


def _fail_in_place(uri: str, run_id: str) -> bool:
    """Set a run of an embedded SQLite store ``FAILED`` on a full disk.

    The statement changes one row of one page that is already on disk; with the journal kept
    in memory SQLite asks the disk for no new byte. Whether the run is ``FAILED`` afterwards
    (``False`` for other stores, or where even this is refused).
    """
    db_path = sqlite_path(uri)
    if db_path is None or not db_path.is_file():
        return False
    try:
        connection = sqlite3.connect(db_path, timeout=10)
        try:
            connection.execute("PRAGMA journal_mode=MEMORY")
            with connection:
                connection.execute(
                    "UPDATE runs SET status = 'FAILED', end_time = ? WHERE run_uuid = ?",
                    (int(time.time() * 1000), run_id),
                )
            row = connection.execute(
                "SELECT status FROM runs WHERE run_uuid = ?", (run_id,)
            ).fetchone()
        finally:
            connection.close()
    except sqlite3.Error as exc:
        log.debug("could not set MLflow run %s FAILED in place: %s", run_id, exc)
        return False
    return row is not None and row[0] == "FAILED"


def _output_root(cfg: ExperimentConfig, run_dir_root: Path | None) -> Path:
    return Path(run_dir_root if run_dir_root is not None else cfg.train.output_dir).resolve()
