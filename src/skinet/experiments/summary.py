"""Tables of experiment results: rich on the console, Markdown, CSV and JSON on disk."""

from __future__ import annotations

import csv
import json
import math
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
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title, show_header=True)
    columns = _columns(rows)
    for column in columns:
        table.add_column(column, justify="left" if column in columns[:1] else "right")
    for row in rows:
        table.add_row(*(format_value(row.get(c)) for c in columns))
    Console().print(table)
