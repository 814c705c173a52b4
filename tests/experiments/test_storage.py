"""Two sweep workers on one PostgreSQL database and one MLflow server backed by PostgreSQL.

The server is a throwaway PostgreSQL from the ``pgserver`` wheel (dev extra), listening on
127.0.0.1 the way a database on another machine is reached.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import optuna
import pytest
import yaml
from mlflow.tracking import MlflowClient
from mlflow.utils.mlflow_tags import MLFLOW_PARENT_RUN_ID
from optuna.trial import TrialState
from tests.helpers.config import requires_modules
from tests.helpers.sweep_fakes import one_epoch

from skinet.tracking.server import find_free_port, start_local_server

ROOT = Path(__file__).parents[2]

pytestmark = [pytest.mark.heavy, requires_modules("pgserver", "psycopg")]


@pytest.fixture
def postgres() -> Iterator[str]:
    """``postgresql+psycopg://postgres@127.0.0.1:<port>``, with databases optuna and mlflow."""
    import pgserver

    # Not in tmp_path: run as root, the server runs as another user, who cannot enter pytest's
    # private (0700) temp root.
    root = Path(tempfile.mkdtemp(prefix="skinet_pg_"))
    pgdata = root / "pgdata"
    # get_server runs initdb and starts the server on a Unix socket (as a non-root user when
    # run as root, which PostgreSQL requires); restart it on TCP like a remote database.
    server = pgserver.get_server(pgdata, cleanup_mode=None)
    server.psql("CREATE DATABASE optuna;")
    server.psql("CREATE DATABASE mlflow;")
    user = server.system_user
    pgserver.pg_ctl(["-w", "-m", "fast", "stop"], pgdata=pgdata, user=user)
    port = find_free_port()
    options = f"-h 127.0.0.1 -p {port} -k {pgdata}"
    log = str(pgdata / "log")
    pgserver.pg_ctl(["-w", "-o", options, "-l", log, "start"], pgdata=pgdata, user=user)
    try:
        yield f"postgresql+psycopg://postgres@127.0.0.1:{port}"
    finally:
        pgserver.pg_ctl(["-w", "-m", "fast", "stop"], pgdata=pgdata, user=user)
        shutil.rmtree(root, ignore_errors=True)


def test_two_workers_share_a_grid_on_postgresql(
    postgres: str, tiny_raw: dict[str, Any], tmp_path: Path
) -> None:
    raw = one_epoch(tiny_raw, lr=[1e-3, 2e-3], weight_decay=[0.0, 0.01])
    config = tmp_path / "sweep.yaml"
    config.write_text(yaml.safe_dump(raw))
    storage = f"{postgres}/optuna"
    with start_local_server(
        f"{postgres}/mlflow", tmp_path / "mlartifacts", startup_timeout=180
    ) as server:
        env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
        env.pop("MLFLOW_TRACKING_URI", None)
        command = [
            sys.executable, "-m", "skinet.cli.main", "sweep", "--config", str(config),
            "--storage", storage, "--study-name", "pg_grid", "--heartbeat-interval", "5",
            "--set", f"TRAIN_CONFIG.mlflow_config.tracking_uri={server.uri}",
        ]  # fmt: skip
        workers = [
            subprocess.Popen(
                command,
                env=env,
                cwd=tmp_path,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
            for _ in range(2)
        ]
        outputs = [w.communicate(timeout=900)[0] for w in workers]
        assert [w.returncode for w in workers] == [0, 0], outputs[0][-3000:] + outputs[1][-3000:]

        study = optuna.load_study(study_name="pg_grid", storage=storage)
        complete = study.get_trials(states=(TrialState.COMPLETE,))
        assert len({tuple(sorted(t.params.items())) for t in complete}) == len(complete) == 4
        assert not study.get_trials(states=(TrialState.FAIL,))

        client = MlflowClient(server.uri)
        experiment = client.get_experiment_by_name("tiny")
        runs = client.search_runs([experiment.experiment_id], max_results=100)
        [parent] = [r for r in runs if r.info.run_name.startswith("optuna_study_")]
        assert parent.info.status == "FINISHED"
        assert study.user_attrs["mlflow_parent_run_id"] == parent.info.run_id
        children = [r for r in runs if r.data.tags.get(MLFLOW_PARENT_RUN_ID) == parent.info.run_id]
        assert len(children) == len({r.info.run_name for r in children}) == 4
        assert all(r.info.status == "FINISHED" for r in children)
        assert len(runs) == 5
