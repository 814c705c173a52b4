"""Checking and starting MLflow tracking servers."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from types import TracebackType
from urllib.parse import urlparse

from skinet.tracking.mlflow_utils import TrackingError, sqlite_path


def check_tracking_server(uri: str, timeout: float = 5.0) -> None:
    """Fail fast, before training, when the tracking store cannot be used.

    For ``http(s)://`` URIs the server's ``/health`` endpoint must answer within ``timeout``
    seconds; for ``sqlite:///`` URIs the database folder is created. Other stores are
    contacted by MLflow itself when the run starts.

    Raises:
        TrackingError: The server does not answer.
    """
    scheme = urlparse(uri).scheme
    if scheme in ("http", "https"):
        health = uri.rstrip("/") + "/health"
        try:
            with urllib.request.urlopen(health, timeout=timeout) as response:
                if response.status == 200:
                    return
                reason = f"HTTP {response.status}"
        except (urllib.error.URLError, OSError) as exc:
            reason = str(getattr(exc, "reason", exc))
        raise TrackingError(
            f"MLflow tracking server {uri} does not answer on {health} ({reason}). Start it with "
            "./start_mlflow.sh, or unset TRAIN_CONFIG.mlflow_config.tracking_uri and "
            "MLFLOW_TRACKING_URI to log to the embedded SQLite store."
        )
    db_path = sqlite_path(uri)
    if db_path is not None:
        db_path.parent.mkdir(parents=True, exist_ok=True)


def find_free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nobody listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


class LocalServer:
    """A running ``mlflow server`` in its own process group; a context manager that stops it.

    Attributes:
        uri: ``http://host:port`` to use as tracking URI.
        process: The ``mlflow server`` process (leader of its process group).
        log_path: File receiving the server's stdout and stderr.
    """

    def __init__(self, uri: str, process: subprocess.Popen[bytes], log_path: Path) -> None:
        self.uri = uri
        self.process = process
        self.log_path = log_path

    def stop(self, timeout: float = 5.0) -> None:
        """Terminate the whole process group (uvicorn workers outlive a killed leader)."""
        if self.process.poll() is None or _group_alive(self.process.pid):
            for sig in (signal.SIGTERM, signal.SIGKILL):
                try:
                    os.killpg(self.process.pid, sig)
                except ProcessLookupError:
                    break
                try:
                    self.process.wait(timeout=timeout)
                    break
                except subprocess.TimeoutExpired:
                    continue
        if self.process.poll() is None:
            self.process.wait(timeout=timeout)

    def __enter__(self) -> LocalServer:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def start_local_server(
    backend_store_uri: str,
    artifact_root: str | Path,
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    workers: int = 1,
    startup_timeout: float = 60.0,
    log_path: str | Path | None = None,
) -> LocalServer:
    """Start ``mlflow server`` and wait until ``/health`` answers.

    Artifacts are proxied by the server (``--serve-artifacts``) and stored under
    ``artifact_root``, so clients need no access to that folder. Use as a context manager::

        with start_local_server("sqlite:///runs/mlflow.db", "runs/mlartifacts") as server:
            ...  # log to server.uri

    Args:
        backend_store_uri: Where runs are stored (``sqlite:///...``, ``postgresql://...``).
        artifact_root: Folder or URI of the artifact store.
        host: Interface to bind; keep loopback unless others must reach it.
        port: TCP port; 0 picks a free one.
        workers: uvicorn workers (1 starts in ~5 s with ~0.5 GB).
        startup_timeout: Seconds to wait for ``/health``.
        log_path: Server log; ``None`` writes ``mlflow_server_<port>.log`` next to the
            SQLite database, else in a local ``artifact_root``, else in the temp folder.

    Raises:
        TrackingError: The server exited or did not answer in time (the log tail is included).
    """
    port = port or find_free_port(host)
    artifacts = str(artifact_root)
    if not urlparse(artifacts).scheme:
        artifacts = str(Path(artifacts).resolve())
    db_path = sqlite_path(backend_store_uri)
    if db_path is not None:
        db_path.parent.mkdir(parents=True, exist_ok=True)
    if log_path is None:
        if db_path is not None:
            log_dir = db_path.parent
        elif not urlparse(artifacts).scheme:
            log_dir = Path(artifacts)
            log_dir.mkdir(parents=True, exist_ok=True)
        else:
            log_dir = Path(tempfile.gettempdir())
        log_path = log_dir / f"mlflow_server_{port}.log"
    log_path = Path(log_path)
    command = [
        sys.executable, "-m", "mlflow", "server",
        "--backend-store-uri", backend_store_uri,
        "--serve-artifacts", "--artifacts-destination", artifacts,
        "--host", host, "--port", str(port), "--workers", str(workers),
    ]  # fmt: skip
    env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    with log_path.open("ab") as log_file:
        process = subprocess.Popen(
            command, stdout=log_file, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
    server = LocalServer(f"http://{host}:{port}", process, log_path)
    deadline = time.monotonic() + startup_timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            break
        try:
            check_tracking_server(server.uri, timeout=1.0)
            return server
        except TrackingError:
            time.sleep(0.2)
    server.stop()
    tail = log_path.read_text(errors="replace")[-2000:]
    raise TrackingError(
        f"mlflow server on {server.uri} did not start within {startup_timeout:.0f} s "
        f"(exit code {process.returncode}); log {log_path}:\n{tail}"
    )


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return True
