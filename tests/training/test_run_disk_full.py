"""A disk that fills up while a run writes: one clear line, a FAILED run, no partial checkpoint.

The second test fills a real filesystem (a small tmpfs, mounted as root). In the first the full
disk is the kernel's own: the training process runs with a file-size limit
(``RLIMIT_FSIZE``, ``SIGXFSZ`` ignored), so the first file that would grow past it fails to
write with ``EFBIG`` exactly as a full disk fails with ``ENOSPC``. The limit sits above every
file of the run but the checkpoints, which a wider model makes larger than it.
"""

from __future__ import annotations

import resource
import shutil
import signal
from pathlib import Path
from typing import Any

import pytest
import torch
from tests.helpers.small_disk import small_disk
from tests.helpers.train_process import train_in_process

LIMIT = 6 * 2**20


def _limited() -> None:
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (LIMIT, LIMIT))


@pytest.mark.heavy
def test_a_full_disk_mid_run_is_one_line_a_failed_run_and_no_partial_checkpoint(
    tiny_raw: dict[str, Any], tmp_path: Path, mlflow_db_template: Path
) -> None:
    from mlflow.tracking import MlflowClient

    output = Path(tiny_raw["TRAIN_CONFIG"]["output_dir"])
    output.mkdir(parents=True)
    shutil.copyfile(mlflow_db_template, output / "mlflow.db")
    tiny_raw["TRAIN_CONFIG"].update(max_epochs=1, use_mlflow_logger=True)
    tiny_raw["MODEL_CONFIG"].update(out_channels_layer1=32, number_of_layers=4)  # ~20 MB ckpt
    returncode, output_text = train_in_process(tiny_raw, tmp_path, 400, _limited)
    assert returncode == 1, output_text[-3000:]
    assert "the disk is full: writing" in output_text and ".ckpt" in output_text, output_text
    assert "--resume last" in output_text
    assert "Traceback" not in output_text and "sqlalchemy" not in output_text.lower()

    [run] = [p for p in output.iterdir() if p.is_dir() and (p / "config.yaml").is_file()]
    leftovers = [p.name for p in run.rglob("*") if p.is_file() and ".ckpt" in p.name]
    assert leftovers == [], leftovers  # neither an empty nor a partial checkpoint
    client = MlflowClient(f"sqlite:///{output / 'mlflow.db'}")
    [mlflow_run] = client.search_runs([client.get_experiment_by_name("tiny").experiment_id])
    assert mlflow_run.info.status == "FAILED"
    assert "DiskFullError" in mlflow_run.data.tags["error"] or "File too large" in str(
        mlflow_run.data.tags["error"]
    )


@pytest.mark.heavy
def test_a_disk_that_really_fills_up_names_the_checkpoint_and_keeps_no_partial_file(
    tiny_raw: dict[str, Any], tmp_path: Path, mlflow_db_template: Path
) -> None:
    """A run writes into a 14 MB tmpfs, with its MLflow store there as by default: the store and
    the first epoch's two 5.4 MB checkpoints fit, the second epoch's next checkpoint does not."""
    from mlflow.tracking import MlflowClient

    with small_disk(tmp_path / "disk", "14m") as disk:
        output = disk / "runs"
        output.mkdir()
        shutil.copyfile(mlflow_db_template, output / "mlflow.db")
        tiny_raw["TRAIN_CONFIG"].update(
            output_dir=str(output), max_epochs=3, use_mlflow_logger=True
        )
        tiny_raw["MODEL_CONFIG"].update(out_channels_layer1=16, number_of_layers=4)
        returncode, output_text = train_in_process(tiny_raw, tmp_path)
        assert returncode == 1, output_text[-3000:]
        last = output_text.strip().splitlines()[-1]
        [run] = [p for p in output.iterdir() if p.is_dir() and (p / "config.yaml").is_file()]
        assert f"the disk is full: writing {run / 'checkpoints'}" in last, output_text[-3000:]
        assert "--resume last" in last and "its MLflow run is marked FAILED" in last
        assert "Traceback" not in output_text and "[SQL:" not in output_text, output_text
        assert len(output_text.splitlines()) < 60, output_text

        names = sorted(p.name for p in (run / "checkpoints").iterdir())
        assert names == ["best-epoch=000.ckpt", "last.ckpt"], names  # nothing partial beside
        for name in names:  # both whole: they load
            torch.load(run / "checkpoints" / name, map_location="cpu", weights_only=False)
        client = MlflowClient(f"sqlite:///{output / 'mlflow.db'}")
        [mlflow_run] = client.search_runs([client.get_experiment_by_name("tiny").experiment_id])
        assert mlflow_run.info.status == "FAILED"
