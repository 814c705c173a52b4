"""check_tracking_server and start_local_server failures (the happy path runs in
tests/training/callbacks/test_setup.py, which trains against a real server)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from skinet.tracking.mlflow_utils import TrackingError
from skinet.tracking.server import check_tracking_server, find_free_port, start_local_server


def test_closed_port_fails_fast() -> None:
    uri = f"http://127.0.0.1:{find_free_port()}"
    start = time.monotonic()
    with pytest.raises(TrackingError, match=r"does not answer on http://127\.0\.0\.1:\d+/health"):
        check_tracking_server(uri, timeout=2)
    assert time.monotonic() - start < 2


def test_sqlite_folder_is_created(tmp_path: Path) -> None:
    check_tracking_server(f"sqlite:///{tmp_path / 'new' / 'mlflow.db'}")
    assert (tmp_path / "new").is_dir()


def test_database_uri_is_left_to_mlflow() -> None:
    check_tracking_server("postgresql://user:pw@127.0.0.1:1/mlflow")  # no network call, no error


@pytest.mark.process
@pytest.mark.slow  # ~5-15 s: mlflow has to import before it can fail
def test_server_that_cannot_start_reports_its_log(tmp_path: Path) -> None:
    log_path = tmp_path / "server.log"
    with pytest.raises(TrackingError, match="did not start") as excinfo:
        start_local_server(
            "nosuchscheme://x", tmp_path / "artifacts", startup_timeout=60, log_path=log_path
        )
    assert str(log_path) in str(excinfo.value) and log_path.stat().st_size > 0
