"""``skinet train`` as a separate process, for faults that need a process of their own (a
file-size limit, a filesystem that fills up)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]


def train_in_process(
    raw: dict[str, Any],
    tmp_path: Path,
    columns: int = 1000,
    preexec_fn: Callable[[], None] | None = None,
) -> tuple[int, str]:
    """Write ``raw`` to ``tmp_path/c.yaml`` and run ``skinet train`` on it from ``tmp_path``
    (no inherited MLflow tracking URI); its exit code and everything it printed."""
    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump(raw))
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_TRACKING_URI")}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "src"), str(REPO)])
    env["COLUMNS"] = str(columns)
    proc = subprocess.run(
        [sys.executable, "-m", "skinet.cli.main", "train", "--config", str(config)],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=300,
        preexec_fn=preexec_fn,
    )
    return proc.returncode, proc.stdout + proc.stderr
