"""The Optuna storage of a sweep: an RDB database with heartbeats, opened with retries."""

from __future__ import annotations

import time
import warnings
from pathlib import Path
from typing import Any

import optuna
import sqlalchemy

from skinet.config.experiment import ExperimentConfig


def default_storage_url(cfg: ExperimentConfig) -> str:
    """``sqlite:///<output_dir>/optuna.db``."""
    return f"sqlite:///{Path(cfg.train.output_dir).resolve() / 'optuna.db'}"


def build_storage(
    url: str, heartbeat_interval: int = 60, grace_period: int | None = None
) -> optuna.storages.RDBStorage:
    """An RDB storage with heartbeats; stale trials are re-queued with the same parameters.

    Args:
        url: SQLAlchemy URL (``sqlite:///...``, ``postgresql+psycopg://...``, ``mysql://...``).
        heartbeat_interval: Seconds between heartbeats of a running trial.
        grace_period: Seconds without heartbeat after which a trial counts as dead
            (default ``2 * heartbeat_interval``).
    """
    if "://" not in url:
        raise ValueError(
            f"--storage expects an RDB URL such as sqlite:///path/optuna.db, got {url!r}"
        )
    engine_kwargs: dict[str, Any] = {}
    sqlite = url.startswith("sqlite")
    if sqlite:
        # Several worker processes write to one file: wait for the lock instead of failing.
        # isolation_level=None stops the driver from opening transactions itself; each one
        # starts with BEGIN IMMEDIATE instead (see _lock_sqlite_transactions).
        engine_kwargs["connect_args"] = {"timeout": 60, "isolation_level": None}
        db_file = url.split(":///", 1)[-1]
        if db_file and db_file != ":memory:":
            Path(db_file).parent.mkdir(parents=True, exist_ok=True)
    else:
        # A server may drop idle connections while a long trial trains.
        engine_kwargs["pool_pre_ping"] = True
    last_error: Exception | None = None
    for attempt in range(5):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                storage = optuna.storages.RDBStorage(
                    url,
                    engine_kwargs=engine_kwargs,
                    heartbeat_interval=heartbeat_interval,
                    grace_period=grace_period,
                    heartbeat_stale_trial_callback=optuna.storages.RetryHeartbeatStaleTrialCallback(
                        max_retry=3
                    ),
                )
                if sqlite:
                    _lock_sqlite_transactions(storage.engine)
                return storage
        except Exception as error:  # noqa: BLE001 - concurrent table creation by another worker
            last_error = error
            time.sleep(0.5 * (attempt + 1))
    raise ValueError(f"cannot open the Optuna storage {url}: {last_error}") from last_error


def _lock_sqlite_transactions(engine: sqlalchemy.engine.Engine) -> None:
    """Start every transaction with ``BEGIN IMMEDIATE``: it holds the write lock from its read.

    Optuna takes a waiting trial by reading its state and then writing RUNNING, reading with
    ``SELECT ... FOR UPDATE``, which SQLite ignores. With the driver's deferred transactions two
    workers can both read "waiting" and both start the trial (the second then fails when it
    reports its value). An immediate transaction makes the second wait for the first to commit.
    """

    @sqlalchemy.event.listens_for(engine, "begin")
    def _begin_immediate(connection: sqlalchemy.engine.Connection) -> None:
        connection.exec_driver_sql("BEGIN IMMEDIATE")
