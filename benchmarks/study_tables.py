"""The results of the recipe study: saved after every cell, tabulated, compared to baseline.

``results.json`` holds every cell's row (``study_cells.run_cell``); ``results.csv`` and
``results.md`` are made from it; ``comparison_<budget>.md`` is ``skinet compare``'s table of
every candidate against ``baseline``, read from the cells' ``per_image.csv`` files.
"""

from __future__ import annotations

import csv
import io
import json
import os
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from study_cells import cell_dir  # noqa: E402

RESULTS_JSON, RESULTS_CSV, RESULTS_MD = "results.json", "results.csv", "results.md"


def load_results(output: Path) -> dict[str, dict[str, Any]]:
    """Rows by ``study_cells.cell_key`` of an earlier run, or nothing."""
    path = output / RESULTS_JSON
    return json.loads(path.read_text())["cells"] if path.is_file() else {}


def write_atomic(path: Path, text: str) -> None:
    """Write to a hidden temporary file, then rename: a kill never leaves half a file."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def save_results(output: Path, cells: dict[str, dict[str, Any]]) -> None:
    """``results.json``, ``results.csv`` and ``results.md`` from every row so far."""
    write_atomic(output / RESULTS_JSON, json.dumps({"cells": cells}, indent=2))
    columns = ["budget", "candidate", "seed", "status", "real_mean_jaccard", "clean_val_jaccard"]
    columns += ["external_jaccard", "val_area_ratio", "external_area_ratio"]
    columns += ["shifted_mean_jaccard", "mean_drop", "worst_condition", "epochs", "fit_seconds"]
    columns += ["images_per_second", "cpu_steal", "wall_seconds", "monitor_value"]
    columns += ["threshold", "checkpoint"]
    columns += ["error", "command"]
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=columns, extrasaction="ignore")
    writer.writeheader()
    writer.writerows(cells.values())
    write_atomic(output / RESULTS_CSV, buffer.getvalue())
    write_atomic(output / RESULTS_MD, markdown_table(cells))


def _mean(rows: list[dict[str, Any]], key: str) -> float | None:
    values = [r[key] for r in rows if r.get(key) is not None]
    return statistics.fmean(values) if values else None


def summarise(cells: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """Seed means per (budget, candidate), deltas to baseline; the rows scored on every set of
    their budget first, best mean of set means first, then the others (``missing_sets``)."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for row in cells.values():
        if row.get("status") == "done":
            groups.setdefault((row["budget"], row["candidate"]), []).append(row)
    rows = []
    for (tag, candidate), runs in groups.items():
        runs.sort(key=lambda r: r["seed"])
        names = sorted({name for r in runs for name in r.get("external_jaccard") or {}})
        rows.append(
            {
                "budget": tag,
                "candidate": candidate,
                "seeds": [r["seed"] for r in runs],
                "clean": statistics.fmean(r["clean_val_jaccard"] for r in runs),
                # A cell scored before external sets existed has val alone (marked below).
                "real": statistics.fmean(
                    r.get("real_mean_jaccard", r["clean_val_jaccard"]) for r in runs
                ),
                "externals": {
                    name: statistics.fmean(
                        r["external_jaccard"][name]
                        for r in runs
                        if name in (r.get("external_jaccard") or {})
                    )
                    for name in names
                },
                "area_ratio": _mean(runs, "val_area_ratio"),
                "shifted": _mean(runs, "shifted_mean_jaccard"),
                "epochs": statistics.fmean(r["epochs"] or 0 for r in runs),
                "images_per_second": _mean(runs, "images_per_second"),
                "steal": _mean(runs, "cpu_steal"),
                "per_seed": [
                    (r["clean_val_jaccard"], r["epochs"], r.get("images_per_second")) for r in runs
                ],
                "scored_sets": set.intersection(*(_scored_sets(r) for r in runs)),
            }
        )
    budget_sets: dict[str, set[str]] = {}
    for row in rows:
        budget_sets.setdefault(row["budget"], set()).update(row["scored_sets"])
    for row in rows:
        row["missing_sets"] = sorted(budget_sets[row["budget"]] - row.pop("scored_sets"))
    baselines = {r["budget"]: r for r in rows if r["candidate"] == "baseline"}
    for row in rows:
        base = baselines.get(row["budget"])
        for key in ("real", "clean", "shifted"):
            missing = base is None or row[key] is None or base[key] is None
            if key == "real" and not missing:  # set means of other sets do not compare
                missing = bool(row["missing_sets"] or base["missing_sets"])
            row[f"d_{key}"] = None if missing else row[key] - base[key]
    rows.sort(key=lambda r: (r["budget"], bool(r["missing_sets"]), -r["real"]))
    return rows


def _scored_sets(row: dict[str, Any]) -> set[str]:
    """The sets a cell was scored on: validation and its external sets at scoring time."""
    return {"val", *(row.get("external_jaccard") or {})}


def _signed(value: float | None) -> str:
    return "" if value is None else f"{value:+.4f}"


def percent(share: float | None) -> str:
    """A share as a whole percentage; empty when unknown."""
    return "" if share is None else f"{share:.0%}"


def figure(value: float | None, digits: int = 4) -> str:
    return "" if value is None else f"{value:.{digits}f}"


def markdown_table(cells: dict[str, dict[str, Any]]) -> str:
    """The study table: one line per (budget, candidate), ranked as :func:`summarise` ranks."""
    rows = summarise(cells)
    names = sorted({name for row in rows for name in row["externals"]})
    lines = [
        "| budget | candidate | seeds | mean of set means | val Jaccard | "
        + "".join(f"{name} | " for name in names)
        + "Δ mean of sets | val area ratio | shift report (diagnostic) | Δ shifted | epochs | "
        "images/s | CPU stolen | per seed (val / epochs / images/s) |",
        "|---|---|---|---|---|" + "---|" * len(names) + "---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        per_seed = "; ".join(
            f"{val:.4f} / {epochs} / {figure(speed, 1)}" for val, epochs, speed in row["per_seed"]
        )
        seeds = ",".join(str(s) for s in row["seeds"])
        externals = "".join(f"{figure(row['externals'].get(name))} | " for name in names)
        candidate = row["candidate"]
        if row["missing_sets"]:
            candidate += f" (not ranked: not scored on {', '.join(row['missing_sets'])})"
        lines.append(
            f"| {row['budget']} | {candidate} | {seeds} | {row['real']:.4f} | "
            f"{row['clean']:.4f} | {externals}{_signed(row['d_real'])} | "
            f"{figure(row['area_ratio'], 2)} | {figure(row['shifted'])} | "
            f"{_signed(row['d_shifted'])} | {row['epochs']:.1f} | "
            f"{figure(row['images_per_second'], 1)} | {percent(row['steal'])} | {per_seed} |"
        )
    note = (
        "\nMeans over seeds. Mean of set means: the mean per-image Jaccard (at the original "
        "resolution) of the validation split and of each external set, averaged with every set "
        "counting once whatever its number of images; not a pooled per-image mean. The table "
        "is ranked by it among the rows scored on every set of their budget; a row marked "
        "'not ranked' was scored before an external set was given (its figure covers fewer "
        "sets): score it again with --rescore and the same --external sets. Δ against "
        "`baseline` at the same budget. The shift report is synthetic and only a "
        "diagnostic. Area ratio: median predicted / true lesion area. Images/s: training "
        "images x epochs / fit time (validation included); per seed beside the epochs, since "
        "a budgeted run's epochs follow the machine's speed. CPU stolen: the share of the "
        "machine's CPU time a virtual machine's host gave to other guests while the cells "
        "trained (Linux /proc/stat); arms that trained under unlike shares did not get the "
        "same machine.\n"
    )
    return "\n".join(lines) + "\n" + note


def cell_scores(output: Path, row: dict[str, Any]) -> dict[str, dict[str, float]]:
    """Per-image Jaccard of a finished cell by set (``val`` and each external), read from the
    ``per_image.csv`` files its ``skinet evaluate`` wrote."""
    evaluate = cell_dir(output, row["budget"], row["candidate"], row["seed"]) / "evaluate"
    files = {"val": evaluate / "per_image.csv"}
    files.update(
        {name: evaluate / name / "per_image.csv" for name in row.get("external_jaccard") or {}}
    )
    scores = {}
    for name, path in files.items():
        if path.is_file():
            with path.open() as handle:
                scores[name] = {
                    line["id"]: float(line["jaccard"]) for line in csv.DictReader(handle)
                }
    return scores


def compare_with_baseline(output: Path, cells: dict[str, dict[str, Any]]) -> str:
    """``skinet compare``'s table of every candidate against ``baseline``, per budget: paired
    bootstrap intervals over images and seeds, on the sets every cell of the budget scored.
    Written to ``comparison_<budget>.md`` too."""
    from skinet.evaluation.compare import compare_scores, comparison_table

    tables = []
    for tag in sorted({row["budget"] for row in cells.values()}):
        done = [r for r in cells.values() if r["budget"] == tag and r.get("status") == "done"]
        candidates = sorted({r["candidate"] for r in done}, key=lambda c: (c != "baseline", c))
        if len(candidates) < 2 or candidates[0] != "baseline":
            continue
        by_cell = [(r["candidate"], cell_scores(output, r)) for r in done]
        sets = sorted(
            set.intersection(*(set(scores) for _, scores in by_cell)), key=lambda n: (n != "val", n)
        )
        scores = {
            name: {c: [s[name] for cand, s in by_cell if cand == c] for c in candidates}
            for name in sets
        }
        if not sets or len({len(runs) for runs in scores[sets[0]].values()}) > 1:
            tables.append(
                f"{tag}: the candidates have different numbers of finished seeds; "
                "compare when every seed is done\n"
            )
            continue
        table = comparison_table(compare_scores(scores))
        write_atomic(output / f"comparison_{tag}.md", table)
        tables.append(f"### {tag}\n\n{table}")
    return "\n".join(tables)
