"""The run summary printed after ``skinet train``."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

import yaml

from skinet.cli.main import main
from skinet.tracking.mlflow_utils import sqlite_path


def test_mlflow_ui_hint_survives_a_path_with_spaces(
    tiny_raw: dict[str, Any], tmp_path: Path, capsys
) -> None:
    output = tmp_path / "my runs (test)"
    tiny_raw["TRAIN_CONFIG"].update(
        output_dir=str(output), max_epochs=1, use_early_stopping=False, use_mlflow_logger=True
    )
    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump(tiny_raw))
    assert main(["train", "--config", str(config), "--no-visualize"]) == 0
    line = next(ln for ln in capsys.readouterr().out.splitlines() if "MLflow UI:" in ln)
    words = shlex.split(line.split("MLflow UI:", 1)[1])
    assert words[:3] == ["mlflow", "ui", "--backend-store-uri"] and len(words) == 4
    database = sqlite_path(words[3])
    assert database is not None and database.is_file() and output in database.parents


def test_the_paths_print_whole_on_a_narrow_console(
    tiny_raw: dict[str, Any], tmp_path: Path, capsys
) -> None:
    """Piped output (80 columns) keeps each path on one line, brackets and all, to copy it."""
    output = tmp_path / "a folder name long enough to pass eighty columns [lab 2]" / "runs"
    tiny_raw["TRAIN_CONFIG"].update(
        output_dir=str(output), max_epochs=1, use_early_stopping=False, use_mlflow_logger=False
    )
    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump(tiny_raw))
    assert main(["train", "--config", str(config), "--no-visualize"]) == 0
    lines = capsys.readouterr().out.splitlines()
    folder = Path(next(ln for ln in lines if ln.startswith("run folder:")).split(":", 1)[1].strip())
    best = next(ln for ln in lines if ln.startswith("best checkpoint:")).split(":", 1)[1].strip()
    assert folder.parent == output and folder.is_dir()
    assert Path(best).is_file() and Path(best).parent == folder / "checkpoints"
