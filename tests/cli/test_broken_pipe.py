"""A ``skinet`` command whose standard output's reader has gone (``skinet config init | head -3``)
ends quietly with status 141, like ``yes | head``: no traceback, no ``--- Logging error ---``, and
a training run it ends is closed like any stopped run."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import optuna
import pytest
import yaml
from mlflow.tracking import MlflowClient
from optuna.trial import TrialState
from tests.helpers.config import tiny_raw_config
from tests.helpers.sweep_fakes import one_epoch

from skinet.runtime.pipes import BROKEN_PIPE_EXIT, stdout_reader_gone

REPO = Path(__file__).resolve().parents[2]


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_TRACKING_URI")}
    return {**env, "PYTHONPATH": os.pathsep.join([str(REPO / "src"), str(REPO)])}


def _run_without_reader(argv: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """``python -m skinet <argv>`` writing into a pipe whose reader closed before it started."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        return subprocess.run(
            [sys.executable, "-m", "skinet", *argv],
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            env=_env(),
            cwd=cwd,
            timeout=300,
        )
    finally:
        os.close(write_end)


@pytest.mark.process
@pytest.mark.parametrize(
    "argv",
    [
        ["config", "init"],  # print
        ["config", "show", "--config", str(REPO / "configs" / "cpu_budget.yaml")],
        ["data", "verify", "--dataset", "synthetic", "--data-dir", "synthetic"],  # a log line
        ["data", "stats", "--dataset", "synthetic", "--data-dir", "synthetic"],  # a rich table
    ],
    ids=["config-init", "config-show", "data-verify", "data-stats"],
)
def test_a_command_whose_reader_has_gone_ends_quietly_with_141(
    argv: list[str], tmp_path: Path
) -> None:
    proc = _run_without_reader(argv, tmp_path)
    assert proc.returncode == BROKEN_PIPE_EXIT, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr and "Logging error" not in proc.stderr, proc.stderr


def _read_until(argv: list[str], cwd: Path, marker: str) -> tuple[int, str, str]:
    """``python -m skinet <argv> | grep -m1 marker``: its exit status, what the reader saw and
    what it wrote to stderr."""
    with subprocess.Popen(
        [sys.executable, "-m", "skinet", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(),
        cwd=cwd,
    ) as proc:
        assert proc.stdout is not None and proc.stderr is not None
        seen = []
        for line in proc.stdout:
            seen.append(line)
            if marker in line:
                break
        proc.stdout.close()
        errors = proc.stderr.read()
        code = proc.wait(timeout=300)
    assert any(marker in line for line in seen), "".join(seen)[-2000:]
    return code, "".join(seen), errors


def _runs(output_dir: Path) -> list[Any]:
    client = MlflowClient(f"sqlite:///{output_dir / 'mlflow.db'}")
    return client.search_runs([e.experiment_id for e in client.search_experiments()])


@pytest.mark.process
@pytest.mark.heavy
def test_a_training_run_whose_reader_leaves_is_closed_as_failed_with_its_last_checkpoint(
    tmp_path: Path, synthetic_root: Path
) -> None:
    raw = tiny_raw_config(tmp_path, synthetic_root)
    raw["TRAIN_CONFIG"]["max_epochs"] = 3
    config = tmp_path / "tiny.yaml"
    config.write_text(yaml.safe_dump(raw))
    argv = ["train", "--config", str(config), "--no-visualize"]
    code, _, errors = _read_until(argv, tmp_path, "epoch 1/3 done")
    assert code == BROKEN_PIPE_EXIT, errors[-2000:]
    assert "Traceback" not in errors and "Logging error" not in errors, errors
    (run_dir,) = (tmp_path / "runs").glob("tiny_*")
    assert (run_dir / "checkpoints" / "last.ckpt").is_file()
    assert not (run_dir / "metrics.json").exists()  # the run does not look finished
    (run,) = _runs(tmp_path / "runs")
    assert run.info.status == "FAILED"
    assert run.data.tags["error"] == "OutputClosed: the standard output's reader has gone"


@pytest.mark.process
@pytest.mark.heavy
def test_a_sweep_whose_reader_leaves_ends_instead_of_running_its_next_trials(
    tmp_path: Path, synthetic_root: Path
) -> None:
    raw = one_epoch(tiny_raw_config(tmp_path, synthetic_root), lr=[1e-3, 2e-3, 3e-3])
    config = tmp_path / "sweep.yaml"
    config.write_text(yaml.safe_dump(raw))
    code, _, errors = _read_until(["sweep", "--config", str(config)], tmp_path, "epoch 1/1 done")
    assert code == BROKEN_PIPE_EXIT, errors[-2000:]
    assert "Traceback" not in errors and "Logging error" not in errors, errors
    # A trial's `except Exception` does not swallow it: the sweep stops in its first trial,
    # left RUNNING like a killed worker's (retried once its heartbeat goes stale), and the
    # other points stay queued.
    storage = f"sqlite:///{tmp_path / 'runs' / 'optuna.db'}"
    (study,) = optuna.get_all_study_summaries(storage)
    trials = optuna.load_study(study_name=study.study_name, storage=storage).get_trials()
    assert [t.state for t in trials] == [TrialState.RUNNING, TrialState.WAITING, TrialState.WAITING]


def test_a_broken_pipe_is_the_output_readers_only_when_it_has_gone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    read_end, write_end = os.pipe()
    with os.fdopen(write_end, "w") as piped:
        monkeypatch.setattr(sys, "stdout", piped)
        # A reader still there: a BrokenPipeError came from elsewhere (a tracking server's
        # socket) and is raised as it is.
        assert not stdout_reader_gone()
        os.close(read_end)
        assert stdout_reader_gone()
        monkeypatch.setattr(sys, "stdout", io.StringIO())  # no file descriptor: not a pipe
        assert not stdout_reader_gone()
