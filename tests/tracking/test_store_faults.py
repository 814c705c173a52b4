"""The embedded MLflow store on a disk that takes no more: built whole or not at all, a broken
one named with what to do, and a run marked FAILED on a disk without a free byte."""

from __future__ import annotations

import resource
import shutil
import signal
from pathlib import Path
from typing import Any

import pytest
from mlflow.tracking import MlflowClient
from tests.helpers.small_disk import fill, small_disk
from tests.helpers.train_process import train_in_process

from skinet.tracking.mlflow_utils import TrackingError, ensure_experiment, mark_run_failed


def _file_size_limit() -> None:
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (204 * 1024, 204 * 1024))  # ulimit -f 204


@pytest.mark.process
def test_a_store_that_cannot_be_built_is_one_line_and_leaves_nothing_to_trip_the_next_run(
    tiny_raw: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    output = Path(tiny_raw["TRAIN_CONFIG"]["output_dir"])
    tiny_raw["TRAIN_CONFIG"].update(use_mlflow_logger=True)
    returncode, text = train_in_process(tiny_raw, tmp_path, preexec_fn=_file_size_limit)
    assert returncode == 1, text[-3000:]
    assert "Traceback" not in text and "[SQL:" not in text, text[-3000:]
    last = text.strip().splitlines()[-1]
    assert f"could not create the MLflow store {output / 'mlflow.db'}" in last, text[-3000:]
    assert sorted(p.name for p in output.iterdir()) == ["mlflow.db.lock"]  # nothing half-built

    # The next run in that folder, without the limit, builds the store and uses it.
    uri = f"sqlite:///{output / 'mlflow.db'}"
    experiment_id = ensure_experiment(uri, "tiny")
    assert MlflowClient(uri).get_experiment(experiment_id).name == "tiny"


def test_a_half_built_store_is_named_with_what_to_do(
    tmp_path: Path, mlflow_db_template: Path
) -> None:
    """What a file-size limit left before stores were built whole: the first 200 kB of one."""
    db = tmp_path / "mlflow.db"
    db.write_bytes(mlflow_db_template.read_bytes()[: 200 * 1024])
    with pytest.raises(TrackingError, match=f"the MLflow store {db} cannot be opened") as info:
        ensure_experiment(f"sqlite:///{db}", "tiny")
    assert "delete it" in str(info.value) and "\n" not in str(info.value)


@pytest.mark.process
def test_a_run_is_marked_failed_on_a_disk_without_a_free_byte(
    tmp_path: Path, mlflow_db_template: Path
) -> None:
    with small_disk(tmp_path / "disk", "3m") as disk:
        shutil.copyfile(mlflow_db_template, disk / "mlflow.db")
        uri = f"sqlite:///{disk / 'mlflow.db'}"
        client = MlflowClient(uri)
        run_id = client.create_run(ensure_experiment(uri, "tiny")).info.run_id
        fill(disk)
        with pytest.raises(Exception, match="database or disk is full"):
            client.set_terminated(run_id, "FAILED")  # MLflow's own write needs a journal

        assert mark_run_failed(run_id, uri, OSError(28, "No space left on device")) is True
        assert client.get_run(run_id).info.status == "FAILED"
