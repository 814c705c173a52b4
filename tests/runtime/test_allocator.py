"""Every ``skinet`` entry point restarts with glibc's allocator tuned for training, once."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from skinet.config.experiment import parse_config
from skinet.runtime.allocator import MALLOC_ENV, OPT_OUT, malloc_tuning, untuned_hint, wants_reexec
from skinet.training.run import run_training

REPO = Path(__file__).resolve().parents[2]
TUNED = "allocator: glibc, tuned for training (MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=2147483647"
HINT = "glibc's allocator is at its defaults"

pytestmark = pytest.mark.skipif(
    "tuned" not in malloc_tuning(dict(MALLOC_ENV)), reason="glibc's allocator only"
)


def _clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in MALLOC_ENV and k != OPT_OUT}
    return {**env, "PYTHONPATH": str(REPO / "src"), **extra}


def _run(command: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(command, capture_output=True, text=True, timeout=300, env=env, cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def test_wants_a_restart_only_when_nothing_is_set() -> None:
    assert wants_reexec({})
    assert not wants_reexec(dict(MALLOC_ENV))  # done already: no loop
    assert not wants_reexec({"MALLOC_MMAP_MAX_": "65536"})  # the user's own choice
    assert not wants_reexec({OPT_OUT: "0"})


@pytest.mark.process
def test_the_skinet_command_runs_with_the_tuned_allocator() -> None:
    skinet = str(Path(sys.executable).with_name("skinet"))
    assert TUNED in _run([skinet, "info"], _clean_env()).stdout


# Prints the allocator state, then restarts as every entry point does: a restart prints twice.
RESTART = (
    "from skinet.runtime.allocator import malloc_tuning, reexec_with_malloc_env\n"
    "print('allocator:', malloc_tuning(), flush=True)\n"
    "reexec_with_malloc_env()\n"
)


def _states(**env: str) -> list[str]:
    return _run([sys.executable, "-c", RESTART], _clean_env(**env)).stdout.splitlines()


@pytest.mark.process
def test_the_restart_happens_once_and_keeps_the_users_setting_and_the_opt_out() -> None:
    restarted = _states()
    assert len(restarted) == 2 and restarted[0] == "allocator: glibc defaults"
    assert restarted[1].startswith(TUNED)
    assert _states(MALLOC_MMAP_MAX_="65536") == [
        "allocator: glibc, as set by the environment (MALLOC_MMAP_MAX_=65536)"
    ]
    assert _states(**{OPT_OUT: "0"}) == ["allocator: glibc defaults"]


@pytest.mark.process
def test_main_run_trains_with_the_tuned_allocator(tiny_raw: dict[str, Any], tmp_path: Path) -> None:
    tiny_raw["TRAIN_CONFIG"].update(max_epochs=1, use_mlflow_logger=False)
    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump(tiny_raw))
    main_run = [sys.executable, str(REPO / "main_run.py"), "--config", str(config), "--verbose"]
    proc = _run(main_run, _clean_env())
    printed = " ".join((proc.stdout + proc.stderr).split())  # the log wraps long lines
    assert TUNED in printed and HINT not in printed


def test_a_training_process_of_ones_own_is_told_how(
    tiny_raw: dict[str, Any], monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    for key in (*MALLOC_ENV, OPT_OUT):
        monkeypatch.delenv(key, raising=False)
    hint = untuned_hint()
    assert hint is not None and HINT in hint and "MALLOC_MMAP_MAX_=0" in hint
    tiny_raw["TRAIN_CONFIG"].update(max_epochs=1, use_mlflow_logger=False)
    with caplog.at_level(logging.INFO, logger="skinet"):
        run_training(parse_config(tiny_raw), visualize=False)
    assert hint in caplog.text
