"""Tracking URIs, artifact locations, run names, experiments and failed runs."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from mlflow.tracking import MlflowClient

from skinet.tracking.mlflow_utils import (
    artifact_location_for,
    ensure_experiment,
    make_run_name,
    mark_run_failed,
    resolve_tracking_uri,
    sqlite_path,
)


@pytest.fixture(autouse=True)
def _no_env_uri(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)


def test_default_is_embedded_sqlite_with_artifacts_beside_it(
    tmp_path: Path, config_from: Any
) -> None:
    cfg = config_from()
    runs = (tmp_path / "runs").resolve()
    uri = resolve_tracking_uri(cfg)
    assert uri == f"sqlite:///{runs}/mlflow.db"
    assert artifact_location_for(cfg, uri) == (runs / "mlartifacts").as_uri()
    other_root = tmp_path / "elsewhere"
    assert resolve_tracking_uri(cfg, other_root) == f"sqlite:///{other_root.resolve()}/mlflow.db"


@pytest.mark.parametrize(
    "uri",
    [
        "postgresql://mlflow:secret@db.example.org:5432/mlflow",
        "http://127.0.0.1:5000",
        "sqlite:////data/mlflow.db",
    ],
)
def test_explicit_uri_is_used_unchanged(uri: str, config_from: Any) -> None:
    assert resolve_tracking_uri(config_from(tracking_uri=uri)) == uri


def test_environment_uri_is_used_when_config_has_none(
    monkeypatch: pytest.MonkeyPatch, config_from: Any
) -> None:
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://127.0.0.1:5000")
    assert resolve_tracking_uri(config_from()) == "http://127.0.0.1:5000"
    explicit = "sqlite:////tmp/explicit.db"
    assert resolve_tracking_uri(config_from(tracking_uri=explicit)) == explicit


def test_artifact_locations(tmp_path: Path, config_from: Any) -> None:
    runs = (tmp_path / "runs").resolve()
    db = tmp_path / "db" / "store.db"
    cfg = config_from(tracking_uri=f"sqlite:///{db}")
    assert artifact_location_for(cfg) == (db.parent.resolve() / "mlartifacts").as_uri()
    cfg = config_from(tracking_uri="postgresql://u:p@host/db")
    assert artifact_location_for(cfg) == (runs / "mlartifacts").as_uri()
    assert artifact_location_for(config_from(tracking_uri="http://127.0.0.1:5000")) is None
    cfg = config_from(artifact_location="relative/artifacts")
    assert artifact_location_for(cfg) == Path("relative/artifacts").resolve().as_uri()
    cfg = config_from(artifact_location="s3://bucket/skinet")
    assert artifact_location_for(cfg) == "s3://bucket/skinet"


def test_sqlite_path() -> None:
    assert sqlite_path("sqlite:////abs/mlflow.db") == Path("/abs/mlflow.db")
    assert sqlite_path("sqlite:///rel.db") == Path("rel.db").resolve()
    assert sqlite_path("sqlite:///:memory:") is None
    assert sqlite_path("postgresql://h/db") is None


def test_make_run_name() -> None:
    name = make_run_name("isic_unet", 200)
    assert re.fullmatch(r"isic_unet_seed200_\d{8}-\d{6}-\d{3}-[0-9a-f]{6}", name)
    assert make_run_name("isic_unet", 200) != name  # unique even within one millisecond


def test_ensure_experiment_creates_reuses_and_restores(sqlite_uri: str, tmp_path: Path) -> None:
    location = (tmp_path / "artifacts").as_uri()
    experiment_id = ensure_experiment(sqlite_uri, "exp", location)
    client = MlflowClient(sqlite_uri)
    assert client.get_experiment(experiment_id).artifact_location == location
    assert ensure_experiment(sqlite_uri, "exp", None) == experiment_id
    client.delete_experiment(experiment_id)
    assert ensure_experiment(sqlite_uri, "exp") == experiment_id
    assert client.get_experiment(experiment_id).lifecycle_stage == "active"


def test_mark_run_failed_records_error(sqlite_uri: str, tmp_path: Path) -> None:
    client = MlflowClient(sqlite_uri)
    experiment_id = ensure_experiment(sqlite_uri, "exp", (tmp_path / "artifacts").as_uri())
    run_id = client.create_run(experiment_id).info.run_id
    try:
        raise ValueError("bad batch")
    except ValueError as exc:
        mark_run_failed(run_id, sqlite_uri, exc)
    run = client.get_run(run_id)
    assert run.info.status == "FAILED"
    assert run.data.tags["error"] == "ValueError: bad batch"
    text = Path(client.download_artifacts(run_id, "error.txt", str(tmp_path))).read_text()
    assert "Traceback" in text and "bad batch" in text


def test_mark_run_failed_never_raises(sqlite_uri: str, caplog: pytest.LogCaptureFixture) -> None:
    mark_run_failed("0" * 32, sqlite_uri, RuntimeError("x"))  # no such run
    assert "could not record" in caplog.text
