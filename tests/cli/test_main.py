"""The commands a user types: ``skinet ...`` and the guide's scripts, through their entry points."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml

from skinet.cli.arguments import parse_overrides
from skinet.cli.main import main

REPO = Path(__file__).resolve().parents[2]


def _write_config(raw: dict[str, Any], path: Path, **train: Any) -> str:
    raw["TRAIN_CONFIG"].update({"use_mlflow_logger": False, "use_early_stopping": False, **train})
    path.write_text(yaml.safe_dump(raw))
    return str(path)


def test_set_overrides_are_typed_yaml_values_and_applied(
    tiny_raw: dict[str, Any], tmp_path: Path
) -> None:
    assert parse_overrides(["A.b=3", "A.c=[1, 2]", "A.d=null", "A.e=x", "A.f="]) == {
        "A.b": 3,
        "A.c": [1, 2],
        "A.d": None,
        "A.e": "x",
        "A.f": "",  # KEY= is the empty string (YAML would read null)
    }
    config = _write_config(tiny_raw, tmp_path / "c.yaml", max_epochs=2)
    assert (
        main(["train", "--config", config, "--no-visualize", "--set", "TRAIN_CONFIG.max_epochs=1"])
        == 0
    )
    last = next((tmp_path / "runs").rglob("last.ckpt"))
    assert torch.load(last, map_location="cpu", weights_only=True)["epoch"] == 0
    assert main(["train", "--config", config, "--set", "novalue"]) == 2


def test_train_resume_through_the_cli(tiny_raw: dict[str, Any], tmp_path: Path, caplog) -> None:
    config = _write_config(tiny_raw, tmp_path / "c.yaml", max_epochs=1)
    assert main(["train", "--config", config, "--no-visualize"]) == 0
    resume = ["train", "--config", config, "--no-visualize", "--resume", "last"]
    assert main([*resume, "--set", "TRAIN_CONFIG.max_epochs=2"]) == 0
    assert main([*resume, "--set", "TRAIN_CONFIG.max_epochs=2"]) == 1
    assert "already trained 2 epoch(s)" in caplog.text


def test_config_errors_are_reported_with_the_path(tmp_path: Path, caplog) -> None:
    config = tmp_path / "bad.yaml"
    config.write_text("TRAIN_CONFIG:\n  batch_size: -3\n")
    assert main(["train", "--config", str(config)]) == 2
    assert "TRAIN_CONFIG.batch_size" in caplog.text
    assert main(["train", "--config", str(tmp_path / "missing.yaml")]) == 2
    assert "config file not found" in caplog.text


def test_data_stats_and_verify_through_the_cli(
    synthetic_root: Path, tmp_path: Path, capsys
) -> None:
    assert main(["data", "stats", "--data-dir", str(synthetic_root), "--split", "all"]) == 0
    stats = yaml.safe_load(capsys.readouterr().out)["DATA_CONFIG"]
    assert len(stats["mean"]) == 3 and len(stats["std"]) == 3
    assert main(["data", "verify", "--data-dir", str(synthetic_root)]) == 0
    assert main(["data", "verify", "--data-dir", str(tmp_path / "nope")]) == 2  # a usage error


def test_seeds_through_the_cli(tiny_raw: dict[str, Any], tmp_path: Path, capsys) -> None:
    config = _write_config(tiny_raw, tmp_path / "c.yaml", max_epochs=1)
    assert main(["seeds", "--config", config, "--seeds", "1", "2"]) == 0
    (summary,) = (tmp_path / "runs").rglob("seeds_summary_*.json")
    out = capsys.readouterr().out
    assert f"summary: {summary} and {summary.with_suffix('.md')}" in out
    run_dirs = json.loads(summary.read_text())["run_dirs"]
    for seed in ("1", "2"):
        assert Path(run_dirs[seed]).is_dir() and f"seed {seed}: {run_dirs[seed]}" in out


@pytest.mark.process
@pytest.mark.parametrize(
    ("command", "subcommand"),
    [
        (["main_run.py"], "train"),
        (["optuna_sweep.py"], "sweep"),
        (["run_seeds.py"], "seeds"),
    ],
)
def test_guide_scripts_dispatch_to_their_subcommand(command: list[str], subcommand: str) -> None:
    proc = subprocess.run(
        [sys.executable, str(REPO / command[0]), "--help"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert f"usage: skinet {subcommand}" in proc.stdout


@pytest.mark.process
def test_console_script_is_installed() -> None:
    skinet = Path(sys.executable).with_name("skinet")
    proc = subprocess.run([str(skinet), "--help"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    for subcommand in (
        "train",
        "data",
        "sweep",
        "seeds",
        "ablation",
        "predict",
        "evaluate",
        "export",
    ):
        assert subcommand in proc.stdout


@pytest.mark.process
def test_ctrl_c_while_training_libraries_import_is_one_line(
    tiny_raw: dict[str, Any], tmp_path: Path
) -> None:
    # The first seconds of `skinet train` import Lightning and MLflow: a real SIGINT sent as
    # that import starts.
    config = _write_config(tiny_raw, tmp_path / "c.yaml")
    code = (
        "import importlib, os, signal, sys\n"
        "real = importlib.import_module\n"
        "def import_module(name, *args, **kwargs):\n"
        "    if name == 'lightning.pytorch':\n"
        "        os.kill(os.getpid(), signal.SIGINT)\n"
        "    return real(name, *args, **kwargs)\n"
        "importlib.import_module = import_module\n"
        "from skinet.cli.main import main\n"
        f"sys.exit(main(['train', '--config', {config!r}]))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=tmp_path
    )
    output = proc.stdout + proc.stderr
    assert proc.returncode == 130, output[-3000:]
    assert "Traceback" not in output, output[-3000:]
    assert "skinet train interrupted (Ctrl-C)" in " ".join(output.split())
    assert not (tmp_path / "runs").exists()
