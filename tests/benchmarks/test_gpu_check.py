"""``benchmarks/gpu_check.py`` end to end on the CPU, with MLflow and Optuna made unimportable.

The GPU machine the check is meant for has neither package, so the subprocess blocks both
imports (``sys.modules[name] = None``) before running the script as ``__main__``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.process

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "benchmarks" / "gpu_check.py"

BOOTSTRAP = """
import runpy, sys
sys.modules.update(mlflow=None, optuna=None)
sys.argv = [sys.argv[1], *sys.argv[2:]]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def test_gpu_check_runs_on_cpu_without_mlflow_or_optuna(tmp_path: Path) -> None:
    out = tmp_path / "check"
    argv = ["--device", "cpu", "--quick", "--out", str(out), "--compile-backend", "eager"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "src"), str(REPO)])}
    proc = subprocess.run(
        [sys.executable, "-c", BOOTSTRAP, str(SCRIPT), *argv, "--precisions", "16-mixed"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]

    report = json.loads((out / "gpu_check.json").read_text())
    assert report["environment"]["modules_absent"] == ["mlflow", "optuna"]
    checks = report["checks"]
    assert set(checks) == {
        "train 16-mixed",
        "combos eager",
        "loader measured",
        "skinet predict",
        "norms",
    }, checks
    assert all(c["passed"] for c in checks.values()), checks
    run = report["train"]["16-mixed"]
    assert run["epochs"] == 1 and Path(run["checkpoint"]).is_file()
    assert "bf16-mixed" in run["note"]  # CPU: no gradient scaler, said so instead of a check
    assert [(r["combo"], r["mode"]) for r in report["combos"]] == [
        ("classical:attention_gate", "eager"),
        ("he2:he2", "eager"),
    ]
    assert report["loader"]["loader_images_per_sec"] > 0
    assert report["loader"]["model_train_images_per_sec"] > 0
    assert report["predict"]["cli_images_per_sec"] > 0
    forms = {(r["form"], r["channels_last"]) for r in report["norms"]}
    assert forms == {
        (f, cl) for f in ("batch", "instance2d", "groupCC", "instance") for cl in (0, 1)
    }
    table = (out / "gpu_check.md").read_text()
    assert "| classical:attention_gate |" in table and "skinet predict" in table
