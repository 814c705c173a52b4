"""on_start_gpu.sh / on_start_cpu.sh / start_mlflow.sh in dry-run, run with bash."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CONFIG = "--config configs/main_config.yaml"


def run_script(script: str, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {
        k: v
        for k, v in os.environ.items()
        if k
        not in {
            "MODE",
            "CONFIG",
            "DATASET",
            "SEEDS",
            "SWEEP_MONITOR",
            "SWEEP_DIRECTION",
            "TRIALS",
            "ENCODER_MODES",
            "MERGE_MODES",
            "RELEASE_GPU",
            "EXTRA_SET",
            "MLFLOW_TRACKING_URI",
            "DRY_RUN",
            "USE_DOCKER",
            "SHM_SIZE",
            "DOCKER_ARGS",
            "HOST",
            "PORT",
        }
    }
    return subprocess.run(
        ["bash", str(REPO / script), *args],
        env={**clean, "USE_DOCKER": "0", **env},
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
    )


def commands(result: subprocess.CompletedProcess[str]) -> list[str]:
    assert result.returncode == 0, result.stderr
    return [line[2:] for line in result.stdout.splitlines() if line.startswith("+ ")]


@pytest.mark.process
@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({}, f"python main_run.py {CONFIG}"),
        ({"MODE": "train"}, f"python main_run.py {CONFIG}"),
        ({"MODE": "sweep"}, f"python optuna_sweep.py {CONFIG}"),
        (
            {"MODE": "seeds", "SEEDS": "42 200,300"},
            f"python run_seeds.py {CONFIG} --seeds 42 200 300",
        ),
        ({"MODE": "seeds"}, f"python run_seeds.py {CONFIG} --seeds 42 200 300"),
        (
            {
                "MODE": "ablation",
                "ENCODER_MODES": "classical,he2",
                "MERGE_MODES": "add attention_gate",
            },
            f"skinet ablation {CONFIG} --encoder-modes classical he2"
            " --merge-modes add attention_gate",
        ),
    ],
)
@pytest.mark.parametrize("flag", ["--dry-run", "DRY_RUN=1"])
def test_each_mode_prints_its_command(env: dict[str, str], expected: str, flag: str) -> None:
    args = ("--dry-run",) if flag == "--dry-run" else ()
    extra = {"DRY_RUN": "1"} if flag != "--dry-run" else {}
    cmds = commands(run_script("on_start_gpu.sh", *args, **env, **extra))
    assert cmds[0] == "./start_mlflow.sh"
    assert cmds[-1].endswith(expected)  # .venv/bin/python ... when the venv exists
    assert "accelerator=cpu" not in cmds[-1]


@pytest.mark.process
def test_sweep_options_only_when_set() -> None:
    plain = commands(run_script("on_start_gpu.sh", "--dry-run", MODE="sweep"))[-1]
    assert "--monitor" not in plain and "--direction" not in plain and "--trials" not in plain
    full = commands(
        run_script(
            "on_start_gpu.sh",
            "--dry-run",
            MODE="sweep",
            SWEEP_MONITOR="val_loss",
            SWEEP_DIRECTION="minimize",
            TRIALS="10",
        )
    )[-1]
    assert full.endswith(
        f"optuna_sweep.py {CONFIG} --monitor val_loss --direction minimize --trials 10"
    )


@pytest.mark.process
def test_cpu_script_forces_cpu_and_dataset_override() -> None:
    cmd = commands(run_script("on_start_cpu.sh", "--dry-run", DATASET="ph2", CONFIG="c.yaml"))[-1]
    assert cmd.endswith(
        "main_run.py --config c.yaml"
        " --set DATA_CONFIG.dataset=ph2 --set TRAIN_CONFIG.accelerator=cpu"
    )


@pytest.mark.process
def test_docker_command_and_gpu_release() -> None:
    cmds = commands(
        run_script("on_start_gpu.sh", "--dry-run", USE_DOCKER="1", RELEASE_GPU="1", MODE="train")
    )
    docker = next(c for c in cmds if c.startswith("docker run"))
    assert "--gpus all" in docker and "--ipc=host" in docker
    assert f"-v {REPO}:/workplace/SkiNet" in docker
    assert docker.endswith(f"skinet:latest python main_run.py {CONFIG}")
    assert cmds[-1] == "lightning studio stop"

    cpu = commands(run_script("on_start_cpu.sh", "--dry-run", USE_DOCKER="1", SHM_SIZE="8g"))
    docker = next(c for c in cpu if c.startswith("docker run"))
    assert "--gpus" not in docker and "--shm-size=8g" in docker and "--ipc=host" not in docker


@pytest.mark.process
def test_other_tracking_uri_starts_no_server() -> None:
    cmds = commands(
        run_script("on_start_gpu.sh", "--dry-run", MLFLOW_TRACKING_URI="sqlite:////tmp/x.db")
    )
    assert "./start_mlflow.sh" not in cmds


@pytest.mark.process
@pytest.mark.parametrize("script", ["on_start_gpu.sh", "on_start_cpu.sh"])
def test_unknown_mode_fails_clearly(script: str) -> None:
    result = run_script(script, "--dry-run", MODE="bogus")
    assert result.returncode != 0
    assert "unknown MODE 'bogus'" in result.stderr
    assert "train, sweep, seeds, ablation" in result.stderr
    assert "+ " not in result.stdout  # nothing was started


@pytest.mark.process
def test_unknown_argument_fails() -> None:
    result = run_script("on_start_gpu.sh", "--bogus")
    assert result.returncode != 0 and "unknown argument" in result.stderr


@pytest.mark.process
def test_start_mlflow_dry_run(tmp_path: Path) -> None:
    result = run_script("start_mlflow.sh", DRY_RUN="1", PORT="5999")
    (cmd,) = commands(result)
    assert " server --backend-store-uri sqlite:///" in cmd
    assert cmd.split("sqlite:///")[1].startswith(f"{REPO}/mlflow.db")
    assert f"--artifacts-destination file://{REPO}/mlartifacts" in cmd
    assert cmd.endswith("--host 127.0.0.1 --port 5999 --workers 1")
    custom = commands(
        run_script(
            "start_mlflow.sh",
            DRY_RUN="1",
            HOST="0.0.0.0",
            WORKERS="2",
            BACKEND_STORE_URI="postgresql://u:p@db/mlflow",
        )
    )[0]
    assert "--backend-store-uri postgresql://u:p@db/mlflow" in custom
    assert custom.endswith("--host 0.0.0.0 --port 5000 --workers 2")


@pytest.mark.process
@pytest.mark.slow  # starts a real server (~5-15 s)
def test_start_mlflow_starts_once_and_stops(tmp_path: Path) -> None:
    from skinet.tracking.server import check_tracking_server, find_free_port

    port = str(find_free_port())
    env = {
        "PORT": port,
        "BACKEND_STORE_URI": f"sqlite:///{tmp_path}/mlflow.db",
        "ARTIFACT_ROOT": f"file://{tmp_path}/artifacts",
        "LOG_FILE": str(tmp_path / "server.log"),
        "PID_FILE": str(tmp_path / "server.pid"),
    }
    try:
        assert run_script("start_mlflow.sh", **env).returncode == 0
        check_tracking_server(f"http://127.0.0.1:{port}")
        again = run_script("start_mlflow.sh", **env)
        assert "already answers" in again.stdout
    finally:
        assert run_script("start_mlflow.sh", "stop", **env).returncode == 0
