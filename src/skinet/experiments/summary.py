"""The summary of an experiment's runs: mean and std of their metrics, and tables of them (rich on
the console, Markdown, CSV and JSON on disk)."""

from __future__ import annotations

import csv
import json
import math
import statistics
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any


def format_value(value: Any) -> str:
    """Floats with 4 significant decimals, ``-`` for missing values."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if isinstance(value, float):
        return f"{value:.4f}"
    return str(value)


def _columns(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    columns: list[str] = []
    for row in rows:
        columns += [key for key in row if key not in columns]
    return columns


def markdown_table(rows: Sequence[Mapping[str, Any]]) -> str:
    """A GitHub-flavoured Markdown table of ``rows``."""
    columns = _columns(rows)
    lines = [
        "| " + " | ".join(columns) + " |",
        "|" + "|".join("---" for _ in columns) + "|",
    ]
    lines += ["| " + " | ".join(format_value(row.get(c)) for c in columns) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def write_csv(path: Path, rows: Sequence[Mapping[str, Any]]) -> Path:
    """Write ``rows`` as CSV with a header (full precision)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=_columns(rows))
        writer.writeheader()
        writer.writerows(rows)
    return path


def write_json(path: Path, payload: Any) -> Path:
    """Write ``payload`` as indented JSON."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(payload, indent=2, default=str))
    return path


def print_table(title: str, rows: Sequence[Mapping[str, Any]]) -> None:
    """Print ``rows`` as a rich table."""
    from rich.table import Table

    from skinet.runtime.console import console

    table = Table(title=title, show_header=True)
    columns = _columns(rows)
    for column in columns:
        table.add_column(column, justify="left" if column in columns[:1] else "right")
    for row in rows:
        table.add_row(*(format_value(row.get(c)) for c in columns))
    console().print(table)


def summary_metric_names(monitor: str, runs: Sequence[Mapping[str, float]]) -> list[str]:
    """The monitor, then every ``test_*`` metric that all runs logged."""
    names = [monitor] if all(monitor in m for m in runs) else []
    tests = sorted({k for m in runs for k in m if k.startswith("test_")})
    return names + [k for k in tests if all(k in m for m in runs)]


def summarize_runs(
    monitor: str, per_run: Mapping[int, Mapping[str, float]]
) -> tuple[dict[str, float], dict[str, float]]:
    """Mean and sample standard deviation (``ddof=1``; 0 for one run) of each summary metric
    over the runs (seeds, folds), keyed by their number."""
    runs = [per_run[key] for key in sorted(per_run)]
    mean, std = {}, {}
    for name in summary_metric_names(monitor, runs):
        values = [float(m[name]) for m in runs]
        mean[name] = statistics.fmean(values)
        std[name] = statistics.stdev(values) if len(values) > 1 else 0.0
    return mean, std
