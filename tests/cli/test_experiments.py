"""``skinet sweep`` as a user runs it: real training, real Optuna and MLflow SQLite stores."""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import optuna
import pytest
import yaml
from mlflow.tracking import MlflowClient
from mlflow.utils.mlflow_tags import MLFLOW_PARENT_RUN_ID
from optuna.trial import TrialState
from tests.helpers.sweep_fakes import FakeTrainer, one_epoch

from skinet.cli.main import main
from skinet.config.experiment import parse_config
from skinet.experiments.ablation import run_ablation
from skinet.experiments.grid import GRID_KEY_ATTR

ROOT = Path(__file__).parents[2]
STUDY = "tiny_val_best_dice_at_threshold"


def _write(raw: dict[str, Any], path: Path) -> Path:
    path.write_text(yaml.safe_dump(raw))
    return path


def _no_mlflow(raw: dict[str, Any], **sweep: list[Any]) -> dict[str, Any]:
    raw = one_epoch(raw, **sweep)
    raw["TRAIN_CONFIG"]["use_mlflow_logger"] = False
    return raw


def _output_dir(raw: dict[str, Any]) -> Path:
    return Path(raw["TRAIN_CONFIG"]["output_dir"]).resolve()


def _trials(raw: dict[str, Any], name: str = STUDY) -> list[optuna.trial.FrozenTrial]:
    storage = f"sqlite:///{_output_dir(raw) / 'optuna.db'}"
    return optuna.load_study(study_name=name, storage=storage).get_trials()


def _running_trials(db: Path) -> int:
    """Trials RUNNING in an Optuna SQLite file, read-only (no schema race with its writer)."""
    try:
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
        try:
            row = conn.execute("SELECT COUNT(*) FROM trials WHERE state = 'RUNNING'").fetchone()
        finally:
            conn.close()
    except sqlite3.Error:
        return 0  # not created yet
    return int(row[0])


def test_a_failed_point_fails_the_sweep_and_is_retried_on_restart(
    tiny_raw: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    raw = _no_mlflow(tiny_raw, lr=[1e-3, 1e12])  # the second point diverges to NaN
    raw["TRAIN_CONFIG"]["gradient_clip_val"] = None
    argv = ["sweep", "--config", str(_write(raw, tmp_path / "sweep.yaml"))]

    assert main(argv) == 1
    assert "1 complete, 1 failed of 2 grid point(s)" in capsys.readouterr().out
    assert main([*argv, "--no-retry-failed"]) == 1
    assert len(_trials(raw)) == 2

    assert main(argv) == 1
    out = capsys.readouterr().out
    assert "1 complete, 1 failed of 2 grid point(s)" in out
    trials = _trials(raw)
    diverging = [t for t in trials if json.loads(t.user_attrs[GRID_KEY_ATTR])["lr"] == 1e12]
    assert [t.state for t in diverging] == [TrialState.FAIL, TrialState.FAIL]
    assert "non-finite" in diverging[-1].user_attrs["error"]


def test_a_bad_grid_point_is_named_before_anything_trains(
    tiny_raw: dict[str, Any], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    raw = one_epoch(tiny_raw, weight_decay=[0.0, -1.0])
    argv = ["sweep", "--config", str(_write(raw, tmp_path / "sweep.yaml"))]
    assert main(argv) == 2
    assert "grid point 2 of 2" in caplog.text
    assert "TRAIN_CONFIG.weight_decay: Input should be greater than or equal to 0" in caplog.text
    output_dir = _output_dir(raw)
    assert not (output_dir / "optuna.db").exists()
    assert not list(output_dir.glob("**/trial_*"))
    assert not (output_dir / "mlflow.db").exists()


@pytest.mark.process
@pytest.mark.slow
def test_a_killed_point_retried_to_success_counts_once(
    tiny_raw: dict[str, Any], tmp_path: Path, mlflow_db_template: Path, capsys: Any
) -> None:
    raw = one_epoch(tiny_raw)
    raw["TRAIN_CONFIG"]["max_epochs"] = 3
    output_dir = _output_dir(raw)
    output_dir.mkdir(parents=True)
    shutil.copyfile(mlflow_db_template, output_dir / "mlflow.db")
    config = _write(raw, tmp_path / "sweep.yaml")
    argv = ["sweep", "--config", str(config), "--heartbeat-interval", "1", "--grace-period", "2"]
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    env.pop("MLFLOW_TRACKING_URI", None)
    worker = subprocess.Popen(
        [sys.executable, "-m", "skinet.cli.main", *argv],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        cwd=tmp_path,
    )
    try:
        deadline = time.monotonic() + 120
        running, started = 0, False
        while time.monotonic() < deadline and not started and worker.poll() is None:
            time.sleep(0.2)
            running = running or _running_trials(output_dir / "optuna.db")
            started = bool(running) and any((output_dir / STUDY).glob("trial_*"))
        time.sleep(1.0)  # into the trial's training
    finally:
        worker.send_signal(signal.SIGKILL)
        worker.wait(timeout=30)
    assert running and started, "no trial started, or it made no folder"

    assert main(argv) == 0
    assert "1 complete, 0 failed of 1 grid point(s)" in capsys.readouterr().out
    assert [t.state for t in _trials(raw)] == [TrialState.FAIL, TrialState.COMPLETE]
    folders = [d for d in (output_dir / STUDY).iterdir() if d.name.startswith("trial_")]
    unfinished = [d.name for d in folders if not (d / "metrics.json").is_file()]
    assert len(unfinished) == 1 and unfinished[0].endswith(".killed"), unfinished

    client = MlflowClient(f"sqlite:///{output_dir / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("tiny")
    runs = client.search_runs([experiment.experiment_id])
    [parent] = [r for r in runs if r.info.run_name == f"optuna_study_{STUDY}"]
    assert parent.info.status == "FINISHED"
    assert parent.data.metrics["n_complete"] == 1 and parent.data.metrics["n_failed"] == 0
    children = [r for r in runs if r.data.tags.get(MLFLOW_PARENT_RUN_ID) == parent.info.run_id]
    assert sorted(r.info.status for r in children) == ["FINISHED", "KILLED"]


def test_a_worker_logging_to_another_mlflow_store_is_stopped(
    tiny_raw: dict[str, Any],
    tmp_path: Path,
    mlflow_db_template: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    raw = one_epoch(tiny_raw, lr=[1e-3, 2e-3])
    _output_dir(raw).mkdir(parents=True)
    shutil.copyfile(mlflow_db_template, _output_dir(raw) / "mlflow.db")
    argv = ["sweep", "--config", str(_write(raw, tmp_path / "sweep.yaml"))]
    assert main([*argv, "--trials", "1"]) == 0

    other = tmp_path / "elsewhere" / "mlflow.db"
    assert main([*argv, "--set", f"TRAIN_CONFIG.mlflow_config.tracking_uri=sqlite:///{other}"]) == 2
    recorded = f"sqlite:///{_output_dir(raw) / 'mlflow.db'}"
    assert f"logs to the MLflow tracking store {recorded}" in caplog.text
    assert f"this worker would log to sqlite:///{other}" in caplog.text
    assert [t.state for t in _trials(raw)] == [TrialState.COMPLETE]  # nothing more trained
    assert not other.exists()


def test_trial_folders_live_under_their_study(tiny_raw: dict[str, Any], tmp_path: Path) -> None:
    raw = _no_mlflow(tiny_raw)
    argv = ["sweep", "--config", str(_write(raw, tmp_path / "sweep.yaml"))]
    output_dir = _output_dir(raw)
    assert main(argv) == 0
    [first] = output_dir.glob(f"{STUDY}/trial_0_*/metrics.json")
    before = first.read_text()

    # A study of the same name in another storage gets its own folder.
    assert main([*argv, "--storage", f"sqlite:///{tmp_path / 'other.db'}"]) == 0
    [second] = output_dir.glob(f"{STUDY}_*/trial_0_*/metrics.json")
    assert first.read_text() == before and second != first


@pytest.mark.parametrize(
    ("flags", "env", "expected"),
    [
        ([], {}, "val_best_dice_at_threshold"),
        ([], {"SWEEP_MONITOR": "val_loss"}, "val_loss"),
        (["--set", "SWEEP_CONFIG.monitor=val_dice"], {"SWEEP_MONITOR": "val_loss"}, "val_dice"),
        (["--monitor", "val_iou", "--set", "SWEEP_CONFIG.monitor=val_dice"], {}, "val_iou"),
    ],
)
def test_monitor_flag_beats_set_beats_environment(
    tiny_raw: dict[str, Any],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    flags: list[str],
    env: dict[str, str],
    expected: str,
) -> None:
    from skinet.cli.experiments import load_sweep_config
    from skinet.cli.main import build_parser

    for name, value in env.items():
        monkeypatch.setenv(name, value)
    config = _write(tiny_raw, tmp_path / "sweep.yaml")
    args = build_parser().parse_args(["sweep", "--config", str(config), *flags])
    cfg = load_sweep_config(args)
    assert cfg.sweep.monitor == expected
    assert cfg.train.checkpoint_config.monitor == expected


def test_ablations_started_together_get_their_own_folders(tiny_raw: dict[str, Any]) -> None:
    raw = _no_mlflow(tiny_raw)
    cfg = parse_config(raw)
    folders = [
        run_ablation(cfg, ["classical"], ["classical"], FakeTrainer()).folder for _ in range(3)
    ]
    assert len(set(folders)) == 3
    assert all(f.parent == _output_dir(raw) and f.name.startswith("ablation_") for f in folders)


@pytest.mark.process
def test_cv_routes_lightnings_log_through_skinets_like_train(
    tmp_path: Path, tiny_raw: dict[str, Any]
) -> None:
    """Lightning's records once each through SkiNet's handler, without its cloud adverts."""
    tiny_raw["TRAIN_CONFIG"].update(max_epochs=1, use_mlflow_logger=False)
    config = tmp_path / "tiny.yaml"
    config.write_text(yaml.safe_dump(tiny_raw))
    result = subprocess.run(
        [sys.executable, "-m", "skinet", "cv", "--config", str(config), "--folds", "2"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-3000:]
    assert "Tip:" not in output
    assert output.count("GPU available") == 2, output[-3000:]  # one line per fold
