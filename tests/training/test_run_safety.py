"""Runs a user can trust, through the CLI: unique run folders, a store that takes runs started
together, ``--resume last`` after real kills and signals, and resumes that reproduce."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml
from tests.helpers.config import tiny_raw_config

from skinet.cli.main import main
from skinet.config.experiment import parse_config
from skinet.tracking.mlflow_utils import resolve_tracking_uri

REPO = Path(__file__).resolve().parents[2]
HARNESS = Path(__file__).parents[1] / "helpers" / "cli_harness.py"
RACERS = 3
ROUNDS = 3


def _env() -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in {"LOCAL_RANK", "RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "NODE_RANK"}
        and not k.startswith(("PL_", "MLFLOW_TRACKING_URI"))
    }
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "src"), str(REPO)])
    env["COLUMNS"] = "500"  # one line per path in the printed summary
    return env


def _write(raw: dict[str, Any], path: Path, **train: Any) -> Path:
    raw["TRAIN_CONFIG"].update(train)
    path.write_text(yaml.safe_dump(raw))
    return path


def _mlflow_run(cfg_path: Path, run_id: str) -> Any:
    from mlflow.tracking import MlflowClient

    from skinet.config.experiment import load_config

    return MlflowClient(resolve_tracking_uri(load_config(cfg_path))).get_run(run_id)


# --- runs started together -------------------------------------------------------------------


@pytest.fixture(scope="module")
def racing_rounds(tmp_path_factory: pytest.TempPathFactory, synthetic_root: Path) -> Path:
    """``ROUNDS`` rounds of ``RACERS`` ``skinet train`` released together on a new store each."""
    folder = tmp_path_factory.mktemp("racing")
    raw = tiny_raw_config(folder, synthetic_root)
    config = _write(
        raw, folder / "race.yaml", max_epochs=1, use_early_stopping=False, limit_train_batches=1
    )
    args = ["train", "--config", str(config), "--no-visualize"]
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                str(HARNESS),
                "barrier",
                str(folder),
                str(i),
                str(ROUNDS),
                "--",
                *args,
            ],
            env=_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for i in range(RACERS)
    ]
    for r in range(ROUNDS):
        deadline = time.monotonic() + 300
        while len(list(folder.glob(f"ready_{r}_*"))) < RACERS:
            assert time.monotonic() < deadline, "racers never became ready"
            assert all(p.poll() is None for p in procs), "a racer exited early"
            time.sleep(0.05)
        (folder / f"go_{r}").touch()
    logs = [p.communicate(timeout=600)[0] for p in procs]
    (folder / "racers.log").write_text("\n\n".join(logs))
    return folder


@pytest.mark.heavy
def test_runs_started_together_on_a_new_sqlite_store_all_succeed(racing_rounds: Path) -> None:
    log = (racing_rounds / "racers.log").read_text()
    codes = {p.name: p.read_text() for p in racing_rounds.glob("rc_*")}
    assert len(codes) == RACERS * ROUNDS
    assert set(codes.values()) == {"0"}, (codes, log[-6000:])
    assert "duplicate column" not in log


@pytest.mark.heavy
def test_runs_started_in_the_same_second_get_their_own_folders(racing_rounds: Path) -> None:
    for r in range(ROUNDS):
        runs = [p.parent for p in (racing_rounds / f"round_{r}").glob("*/metrics.json")]
        assert len(runs) == RACERS, sorted(p.name for p in (racing_rounds / f"round_{r}").iterdir())
        names = {json.loads((run / "metrics.json").read_text())["run_name"] for run in runs}
        assert names == {run.name for run in runs}
        ids = {json.loads((run / "metrics.json").read_text())["mlflow_run_id"] for run in runs}
        assert len(ids) == RACERS


# --- resume ------------------------------------------------------------------------------------


def _run_folders(output_dir: Path) -> list[Path]:
    return sorted(p.parent for p in output_dir.glob("*/config.yaml"))


def _kill_run(config: Path, hook: str, epoch: int, *extra: str) -> subprocess.CompletedProcess:
    """``skinet train`` SIGKILLed when ``LightningModel.<hook>`` runs in ``epoch``."""
    args = ["train", "--config", str(config), "--no-visualize", *extra]
    proc = subprocess.run(
        [sys.executable, str(HARNESS), "kill", hook, str(epoch), "--", *args],
        env=_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == -signal.SIGKILL, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc


def _model_metrics(run_dir: Path) -> dict[str, float]:
    metrics = json.loads((run_dir / "metrics.json").read_text())["metrics"]
    return {k: v for k, v in metrics.items() if not k.startswith(("perf/", "system/"))}


def test_resume_last_takes_the_newest_run_of_the_same_experiment(
    tiny_raw: dict[str, Any], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    tiny_raw["TRAIN_CONFIG"].update({"use_mlflow_logger": False, "max_epochs": 1})
    mine = _write(tiny_raw, tmp_path / "mine.yaml")
    assert main(["train", "--config", str(mine), "--no-visualize"]) == 0
    (run,) = _run_folders(tmp_path / "runs")
    other = _write(tiny_raw, tmp_path / "other.yaml", experiment_name="other")
    assert main(["train", "--config", str(other), "--no-visualize"]) == 0

    resume = ["train", "--config", str(mine), "--no-visualize", "--resume", "last"]
    assert main([*resume, "--set", "TRAIN_CONFIG.max_epochs=2"]) == 0
    assert f"resuming run {run.name}" in caplog.text
    checkpoint = torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)
    assert checkpoint["epoch"] == 1
    others = [r for r in _run_folders(tmp_path / "runs") if r != run]
    assert [r.name.startswith("other_seed") for r in others] == [True]
    assert torch.load(others[0] / "checkpoints" / "last.ckpt", weights_only=True)["epoch"] == 0


@pytest.mark.heavy
def test_kill_before_the_test_then_resume_last_finishes_the_run(
    tiny_raw: dict[str, Any], tmp_path: Path
) -> None:
    config = _write(tiny_raw, tmp_path / "c.yaml", max_epochs=2, use_early_stopping=False)
    _kill_run(config, "on_test_start", -1)
    (run,) = _run_folders(tmp_path / "runs")
    assert not (run / "metrics.json").exists()
    run_id = torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)["skinet"][
        "mlflow_run_id"
    ]
    unfinished = _mlflow_run(config, run_id)
    assert unfinished.info.status == "RUNNING"  # left so by the dead attempt
    assert "test_dice" not in unfinished.data.metrics

    assert main(["train", "--config", str(config), "--no-visualize", "--resume", "last"]) == 0
    summary = json.loads((run / "metrics.json").read_text())
    assert 0.0 <= summary["metrics"]["test_dice"] <= 1.0
    assert summary["epochs_trained"] == 2
    mlflow_run = _mlflow_run(config, run_id)
    assert mlflow_run.info.status == "FINISHED"
    assert mlflow_run.data.tags["skinet.resumed_from_status"] == "KILLED"
    assert "test_dice" in mlflow_run.data.metrics


@pytest.mark.heavy
@pytest.mark.parametrize(
    ("sig", "code", "to_group"),
    [
        (signal.SIGINT, 130, False),
        (signal.SIGTERM, 143, False),
        # Ctrl-C in a terminal, and a scheduler's kill of the job, reach every process of the
        # group: the DataLoader workers as well as the trainer.
        (signal.SIGINT, 130, True),
        (signal.SIGTERM, 143, True),
    ],
    ids=["SIGINT", "SIGTERM", "SIGINT-group", "SIGTERM-group"],
)
def test_signal_marks_the_run_killed_and_leaves_a_resumable_checkpoint(
    tiny_raw: dict[str, Any], tmp_path: Path, sig: signal.Signals, code: int, to_group: bool
) -> None:
    workers = 2 if to_group else 0
    config = _write(
        tiny_raw, tmp_path / "c.yaml", max_epochs=200, use_early_stopping=False, num_workers=workers
    )
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "skinet.cli.main",
            "train",
            "--config",
            str(config),
            "--no-visualize",
        ],
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # its own process group, as a shell's foreground job
    )
    deadline = time.monotonic() + 300
    while not list((tmp_path / "runs").glob("*/checkpoints/last.ckpt")):
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[0][-3000:]
        time.sleep(0.1)
    time.sleep(0.5)  # into a later epoch
    if to_group:
        os.killpg(proc.pid, sig)
    else:
        proc.send_signal(sig)
    output = proc.communicate(timeout=120)[0]
    assert proc.returncode == code, output[-3000:]
    # A stop, not a crash: no traceback from the trainer or from a worker.
    assert "Traceback" not in output, output[-3000:]

    (run,) = _run_folders(tmp_path / "runs")
    checkpoint = torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)
    mlflow_run = _mlflow_run(config, checkpoint["skinet"]["mlflow_run_id"])
    assert mlflow_run.info.status == "KILLED"
    assert mlflow_run.data.tags["skinet.stopped_by"] == f"stopped by {sig.name}"
    assert "error" not in mlflow_run.data.tags
    more = f"TRAIN_CONFIG.max_epochs={checkpoint['epoch'] + 2}"
    resume = ["train", "--config", str(config), "--no-visualize", "--resume", "last"]
    assert main([*resume, "--set", more]) == 0
    assert _mlflow_run(config, checkpoint["skinet"]["mlflow_run_id"]).info.status == "FINISHED"


@pytest.mark.heavy
def test_a_run_stopped_before_its_first_epoch_ended_says_there_is_nothing_to_resume(
    tiny_raw: dict[str, Any], tmp_path: Path
) -> None:
    # torch.compile's tracing holds the first step for seconds: a signal sent when fit begins
    # lands before the first epoch ends.
    config = _write(
        tiny_raw, tmp_path / "c.yaml", use_torch_compile=True, torch_compile_backend="eager"
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "skinet.cli.main", "train", "--config", str(config)],
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    assert proc.stdout is not None
    seen = []
    for line in proc.stdout:  # the model summary's totals: fit has begun
        seen.append(line)
        if "FLOPs:" in line:
            break
    os.killpg(proc.pid, signal.SIGINT)
    output = "".join(seen) + proc.communicate(timeout=120)[0]
    assert proc.returncode == 130, output[-3000:]
    assert not list((tmp_path / "runs").glob("*/checkpoints/*.ckpt"))
    flat = " ".join(output.split())
    assert "no checkpoint to resume; run the command again" in flat, output[-3000:]
    assert "--resume last" not in flat
    assert "Traceback" not in output


def _signal_run(config: Path, how: str, sig: signal.Signals, after: str, *extra: str) -> str:
    """``skinet train`` sent ``sig`` as soon as ``skinet.training.run.<after>`` returns (``how``:
    see the harness); its output, on one line."""
    args = ["train", "--config", str(config), *extra]
    proc = subprocess.run(
        [sys.executable, str(HARNESS), how, sig.name, after, "--", *args],
        env=_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    output = proc.stdout + proc.stderr
    assert proc.returncode == 128 + sig, output[-3000:]
    assert "Traceback" not in output, output[-3000:]
    return " ".join(output.split())


@pytest.mark.heavy
def test_a_resume_stopped_before_fit_closes_its_reopened_mlflow_run(
    tiny_raw: dict[str, Any], tmp_path: Path
) -> None:
    # A resume reopens its MLflow run as it starts; a stop before fit must close it again.
    config = _write(tiny_raw, tmp_path / "c.yaml", max_epochs=1, use_early_stopping=False)
    assert main(["train", "--config", str(config), "--no-visualize"]) == 0
    (run,) = _run_folders(tmp_path / "runs")
    run_id = json.loads((run / "metrics.json").read_text())["mlflow_run_id"]
    resume = ["--no-visualize", "--resume", "last", "--set", "TRAIN_CONFIG.max_epochs=2"]

    flat = _signal_run(config, "signal", signal.SIGTERM, "build_trainer", *resume)
    assert "stopped by SIGTERM: the MLflow run is KILLED; continue with --resume last" in flat
    stopped = _mlflow_run(config, run_id)
    assert stopped.info.status == "KILLED"
    assert stopped.data.tags["skinet.stopped_by"] == "stopped by SIGTERM"

    assert main(["train", "--config", str(config), *resume]) == 0
    assert _mlflow_run(config, run_id).info.status == "FINISHED"
    assert torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)["epoch"] == 1


@pytest.mark.heavy
def test_a_new_run_stopped_while_its_folder_is_written_says_there_is_nothing_to_resume(
    tiny_raw: dict[str, Any], tmp_path: Path
) -> None:
    config = _write(tiny_raw, tmp_path / "c.yaml")
    # Ctrl-C while the augmented samples are drawn, after config.yaml is written.
    flat = _signal_run(config, "signal", signal.SIGINT, "visualize_augmented_data")
    assert "stopped by SIGINT before its first epoch ended: there is no checkpoint to resume" in (
        flat
    )
    assert "MLflow run is KILLED" not in flat  # fit never opened one
    (run,) = _run_folders(tmp_path / "runs")
    assert not (run / "metrics.json").exists()
    assert not list(run.glob("checkpoints/*.ckpt"))


@pytest.mark.heavy
def test_a_signal_that_lands_in_a_finalizer_still_stops_the_run(
    tiny_raw: dict[str, Any], tmp_path: Path
) -> None:
    # Python runs a signal handler wherever the main thread is, a __del__ among those places,
    # and ignores what a __del__ raises: the stop must not be lost there.
    config = _write(tiny_raw, tmp_path / "c.yaml", max_epochs=200, use_early_stopping=False)
    flat = _signal_run(config, "signal-in-del", signal.SIGTERM, "build_trainer", "--no-visualize")
    assert "stopped by SIGTERM before its first epoch ended" in flat
    assert "Exception ignored" not in flat
    (run,) = _run_folders(tmp_path / "runs")
    assert not (run / "metrics.json").exists()


@pytest.mark.process
def test_last_checkpoint_is_written_after_every_epoch(
    tiny_raw: dict[str, Any], tmp_path: Path
) -> None:
    # No epoch saves a best checkpoint here, the extreme case of a monitor that stops
    # improving: Lightning's own save_last then writes last.ckpt only when training ends.
    tiny_raw["TRAIN_CONFIG"]["checkpoint_config"] = {"save_top_k": 0}
    config = _write(tiny_raw, tmp_path / "c.yaml", max_epochs=3, use_mlflow_logger=False)
    _kill_run(config, "on_validation_epoch_start", 2)
    (run,) = _run_folders(tmp_path / "runs")
    last = run / "checkpoints" / "last.ckpt"
    assert last.is_file(), sorted(p.name for p in (run / "checkpoints").glob("*"))
    assert torch.load(last, weights_only=True)["epoch"] == 1


@pytest.mark.heavy
@pytest.mark.parametrize("augment_on", ["cpu", "device"])
def test_killed_and_resumed_run_reproduces_the_uninterrupted_one(
    tiny_raw: dict[str, Any], tmp_path: Path, augment_on: str
) -> None:
    # Workers matter on the CPU path: each epoch's augmentations come from persistent worker
    # processes that a resume starts afresh. The device path augments in the training process.
    tiny_raw["TRAIN_CONFIG"].update(
        {
            "max_epochs": 3,
            "use_early_stopping": False,
            "deterministic": True,
            "num_workers": 2 if augment_on == "cpu" else 0,
            "augment_on": augment_on,
        }
    )
    whole = _write(tiny_raw, tmp_path / "whole.yaml", output_dir=str(tmp_path / "whole"))
    assert main(["train", "--config", str(whole), "--no-visualize"]) == 0
    (uninterrupted,) = _run_folders(tmp_path / "whole")

    config = _write(tiny_raw, tmp_path / "c.yaml", output_dir=str(tmp_path / "runs"))
    _kill_run(config, "on_validation_epoch_start", 2)
    (run,) = _run_folders(tmp_path / "runs")
    checkpoint = torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)
    assert checkpoint["epoch"] == 1  # only the epoch in progress is lost
    assert main(["train", "--config", str(config), "--no-visualize", "--resume", "last"]) == 0

    assert _model_metrics(run) == _model_metrics(uninterrupted)
    mlflow_run = _mlflow_run(config, checkpoint["skinet"]["mlflow_run_id"])
    assert mlflow_run.info.status == "FINISHED"
    assert mlflow_run.data.tags["skinet.resumed_from_status"] == "KILLED"
    from mlflow.tracking import MlflowClient

    client = MlflowClient(resolve_tracking_uri(parse_config(tiny_raw)))
    steps = [
        m.step for m in client.get_metric_history(checkpoint["skinet"]["mlflow_run_id"], "lr-AdamW")
    ]
    assert len(steps) == 3 and len(set(steps)) == 3, steps


def test_resume_with_more_epochs_applies_the_current_schedule_and_records_it(
    tiny_raw: dict[str, Any], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    tiny_raw["TRAIN_CONFIG"].update(
        {
            "max_epochs": 1,
            "use_lr_scheduler": True,
            "scheduler_type": "cosine_annealing",
            "cosine_annealing_config": {"eta_min": 1e-5},
            "early_stopping_config": {"patience": 3},
        }
    )
    config = _write(tiny_raw, tmp_path / "c.yaml")
    assert main(["train", "--config", str(config), "--no-visualize"]) == 0
    (run,) = _run_folders(tmp_path / "runs")
    resume = ["train", "--config", str(config), "--no-visualize", "--resume", "last"]
    changes = [
        "TRAIN_CONFIG.max_epochs=3",
        "TRAIN_CONFIG.cosine_annealing_config.eta_min=0.0001",
        "TRAIN_CONFIG.early_stopping_config.patience=7",
    ]
    assert main([*resume, *(x for c in changes for x in ("--set", c))]) == 0

    checkpoint = torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)
    assert checkpoint["epoch"] == 2
    (scheduler,) = checkpoint["lr_schedulers"]
    assert (scheduler["T_max"], scheduler["eta_min"]) == (3, 1e-4)
    (stopping,) = [v for k, v in checkpoint["callbacks"].items() if k.startswith("EarlyStopping")]
    assert stopping["patience"] == 7
    params = _mlflow_run(config, checkpoint["skinet"]["mlflow_run_id"]).data.params
    assert params["TRAIN_CONFIG/max_epochs"] == "1"
    assert params["resume/1/TRAIN_CONFIG/max_epochs"] == "3"
    assert params["resume/1/TRAIN_CONFIG/early_stopping_config/patience"] == "7"
    # ... and the log says what changed, from what to what.
    said = " ".join(caplog.text.split())
    assert "TRAIN_CONFIG/max_epochs 1 -> 3" in said and "patience 3 -> 7" in said


@pytest.mark.heavy
def test_ddp_ranks_use_rank_zero_run_folder_and_write_nothing_of_their_own(
    tiny_raw: dict[str, Any], tmp_path: Path
) -> None:
    config = _write(
        tiny_raw, tmp_path / "c.yaml", max_epochs=1, strategy="ddp", devices=2, num_workers=0
    )
    proc = subprocess.run(
        [sys.executable, "-m", "skinet.cli.main", "train", "--config", str(config)],
        env=_env(),
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    entries = sorted(p.name for p in (tmp_path / "runs").iterdir())
    (run,) = _run_folders(tmp_path / "runs")
    assert entries == sorted([run.name, "mlflow.db", "mlflow.db.lock", "mlartifacts"])
    assert (run / "augmented_samples.png").is_file() and (run / "metrics.json").is_file()
    # Both ranks print their summary: rank 1 reports rank 0's folder and MLflow run.
    folders = [line for line in proc.stdout.splitlines() if line.startswith("run folder:")]
    assert len(folders) == 2 and len(set(folders)) == 1 and folders[0].endswith(run.name)
    run_ids = {line for line in proc.stdout.splitlines() if line.startswith("MLflow run id:")}
    assert len(run_ids) == 1


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ("TRAIN_CONFIG.lr=0.05", "TRAIN_CONFIG.lr: 0.001 -> 0.05"),
        ("MODEL_CONFIG.out_channels_layer1=16", "MODEL_CONFIG.out_channels_layer1: 8 -> 16"),
    ],
)
def test_resume_refuses_a_change_it_cannot_apply_before_touching_the_run(
    tiny_raw: dict[str, Any],
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    change: str,
    named: str,
) -> None:
    config = _write(tiny_raw, tmp_path / "c.yaml", max_epochs=1)
    assert main(["train", "--config", str(config), "--no-visualize"]) == 0
    (run,) = _run_folders(tmp_path / "runs")
    checkpoint = torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)
    saved_config = (run / "config.yaml").read_text()
    before = _mlflow_run(config, checkpoint["skinet"]["mlflow_run_id"])
    resume = ["train", "--config", str(config), "--no-visualize", "--resume", "last"]
    assert main([*resume, "--set", "TRAIN_CONFIG.max_epochs=2", "--set", change]) == 1
    assert named in caplog.text and "--init-from" in caplog.text
    assert "size mismatch" not in caplog.text
    after = _mlflow_run(config, checkpoint["skinet"]["mlflow_run_id"])
    assert after.info.status == before.info.status == "FINISHED"
    assert after.data.params == before.data.params
    assert (run / "config.yaml").read_text() == saved_config
    assert torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)["epoch"] == 0


def test_resume_applies_new_plateau_settings(tiny_raw: dict[str, Any], tmp_path: Path) -> None:
    tiny_raw["TRAIN_CONFIG"].update(
        {
            "max_epochs": 1,
            "use_lr_scheduler": True,
            "scheduler_type": "reduce_on_plateau",
            "lr_scheduler_config": {"patience": 3, "factor": 0.5},
        }
    )
    config = _write(tiny_raw, tmp_path / "c.yaml")
    assert main(["train", "--config", str(config), "--no-visualize"]) == 0
    (run,) = _run_folders(tmp_path / "runs")
    resume = ["train", "--config", str(config), "--no-visualize", "--resume", "last"]
    changes = ["TRAIN_CONFIG.max_epochs=2", "TRAIN_CONFIG.lr_scheduler_config.patience=9"]
    changes.append("TRAIN_CONFIG.lr_scheduler_config.factor=0.25")
    assert main([*resume, *(x for c in changes for x in ("--set", c))]) == 0
    (scheduler,) = torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)["lr_schedulers"]
    assert (scheduler["patience"], scheduler["factor"]) == (9, 0.25)


def test_resume_from_a_truncated_checkpoint_names_it_and_the_checkpoints_beside_it(
    tiny_raw: dict[str, Any], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    config = _write(tiny_raw, tmp_path / "c.yaml", max_epochs=1)
    assert main(["train", "--config", str(config), "--no-visualize"]) == 0
    (run,) = _run_folders(tmp_path / "runs")
    last = run / "checkpoints" / "last.ckpt"
    last.write_bytes(last.read_bytes()[:4096])
    resume = ["train", "--config", str(config), "--no-visualize", "--resume", str(last)]
    assert main([*resume, "--set", "TRAIN_CONFIG.max_epochs=2"]) == 1
    assert "is truncated or damaged" in caplog.text and "best-epoch=000.ckpt" in caplog.text


@pytest.mark.parametrize("problem", ["file", "read_only"])
def test_an_output_dir_that_cannot_hold_runs_is_named_before_anything_starts(
    tiny_raw: dict[str, Any], tmp_path: Path, caplog: pytest.LogCaptureFixture, problem: str
) -> None:
    if problem == "file":
        output = tmp_path / "out"
        output.write_text("not a folder")
        expected = "is a file, not a folder"
    else:  # sysfs refuses new folders even to root, as a read-only mount does
        output = Path("/sys/skinet_runs")
        try:  # EPERM on most kernels, EROFS where /sys is mounted read-only (containers)
            output.mkdir()
        except OSError as error:
            expected = f"cannot be written to ({error.strerror})"
        else:
            output.rmdir()
            pytest.fail("/sys accepted a new folder: no unwritable folder to test with")
    config = _write(tiny_raw, tmp_path / "c.yaml", output_dir=str(output))
    assert main(["train", "--config", str(config), "--no-visualize"]) == 1
    assert f"TRAIN_CONFIG.output_dir {output} {expected}" in caplog.text
    assert "Traceback" not in caplog.text


def test_a_split_smaller_than_the_ddp_world_is_refused_before_the_trainer_starts(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from skinet.datasets.synthetic import make_synthetic_dataset

    # One validation image for two gloo ranks: the second rank would wait in the metric gather.
    root = make_synthetic_dataset(
        tmp_path / "data", num_train=8, num_val=1, num_test=0, image_size=48, seed=0
    )
    raw = tiny_raw_config(tmp_path, root)
    config = _write(raw, tmp_path / "c.yaml", strategy="ddp", devices=2, max_epochs=1)
    assert main(["train", "--config", str(config), "--no-visualize"]) == 1
    assert "the val split has 1 image(s) but the run has 2 training processes" in caplog.text
    assert not (tmp_path / "runs").exists()


@pytest.mark.heavy
def test_a_run_resumed_after_a_kill_before_its_test_draws_every_epochs_plots(
    tiny_raw: dict[str, Any], tmp_path: Path
) -> None:
    tiny_raw["TRAIN_CONFIG"].update({"max_epochs": 2, "use_early_stopping": False})
    config = _write(tiny_raw, tmp_path / "c.yaml", output_dir=str(tmp_path / "runs"))
    _kill_run(config, "on_test_start", 2)
    (run,) = _run_folders(tmp_path / "runs")
    assert not (run / "metrics.json").exists()
    assert main(["train", "--config", str(config), "--no-visualize", "--resume", "last"]) == 0
    plots = run / "plots"
    assert (plots / "learning_curves.png").is_file() and (plots / "val_predictions.png").is_file()
    checkpoint = torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)
    (state,) = [v for k, v in checkpoint["callbacks"].items() if k.startswith("EpochMetrics")]
    assert sorted(state["history"]) == sorted(state["train"]) == ["0", "1"]
    # The resume trained no epoch: the last recorded one's train figures are reported.
    summary = json.loads((run / "metrics.json").read_text())["metrics"]
    assert summary["train_loss"] == pytest.approx(state["train"]["1"]["train_loss"])
    assert any(name.startswith("lr-") for name in summary)  # the learning rate and throughput
    assert summary["perf/samples_per_sec"] == state["train"]["1"]["perf/samples_per_sec"]


@contextlib.contextmanager
def _address_space_limit(extra_gb: int) -> Iterator[None]:
    """``RLIMIT_AS`` at the process's virtual size plus ``extra_gb``, restored afterwards."""
    import resource

    status = Path("/proc/self/status").read_text()
    size_kb = int(
        next(line for line in status.splitlines() if line.startswith("VmSize:")).split()[1]
    )
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    limit = size_kb * 1024 + extra_gb * 2**30
    capped = limit if hard == resource.RLIM_INFINITY else min(limit, hard)
    resource.setrlimit(resource.RLIMIT_AS, (capped, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def test_out_of_memory_says_what_to_lower_and_leaves_no_run_folder(
    tiny_raw: dict[str, Any], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # 2**20 channels: the first 3x3 conv between them asks for 36 TB. An address-space limit a
    # few GB above what the process holds makes the allocator refuse it at once on any kernel
    # (with vm.overcommit_memory=1 the kernel alone would hand it out and let it be touched).
    config = _write(tiny_raw, tmp_path / "c.yaml", max_epochs=1)
    argv = ["train", "--config", str(config), "--no-visualize"]
    with _address_space_limit(extra_gb=8):
        code = main([*argv, "--set", "MODEL_CONFIG.out_channels_layer1=1048576"])
    assert code == 1
    assert "out of memory while building the model" in caplog.text
    assert "MODEL_CONFIG.out_channels_layer1 (now 1048576)" in caplog.text
    assert "TRAIN_CONFIG.batch_size (now 4)" in caplog.text and "Traceback" not in caplog.text
    assert not (tmp_path / "runs").exists()


def test_a_resume_removes_empty_checkpoints_a_full_disk_left(
    tiny_raw: dict[str, Any],
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
) -> None:
    config = _write(tiny_raw, tmp_path / "c.yaml", max_epochs=1)
    assert main(["train", "--config", str(config), "--no-visualize"]) == 0
    (run,) = _run_folders(tmp_path / "runs")
    empty = run / "checkpoints" / "best-epoch=007.ckpt"
    empty.touch()
    cut_short = run / "checkpoints" / ".last.ckpt.0a1b2c3d.partial"  # a kill mid-write
    cut_short.write_bytes(b"PK\x03\x04")
    resume = ["train", "--config", str(config), "--no-visualize", "--resume", "last"]
    assert main([*resume, "--set", "TRAIN_CONFIG.max_epochs=2"]) == 0
    assert not empty.exists() and not cut_short.exists()
    assert f"removed the empty checkpoint {empty}" in caplog.text
    assert all(p.stat().st_size > 0 for p in (run / "checkpoints").glob("*.ckpt"))
    # The changed max_epochs is recorded as resume/1/..., not refused by MLflow as a new value.
    printed = caplog.text + "".join(capfd.readouterr())
    assert "Changing param values is not allowed" not in printed
