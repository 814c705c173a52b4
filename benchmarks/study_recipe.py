"""Recipe study: candidate training recipes at an equal wall-clock budget, scored clean and shifted.

Usage::

    # screening: every single option at 5 minutes, two seeds each
    python benchmarks/study_recipe.py --data-dir data/ISIC2017 --output study --budget 00:00:05:00
    # the last candidates at the full budget
    python benchmarks/study_recipe.py --data-dir data/ISIC2017 --output study \\
        --budget 00:00:15:00 --candidates baseline,instance+shades_of_gray+robust_aug
    # the table of what has finished so far
    python benchmarks/study_recipe.py --output study --table

Every cell (candidate x seed x budget) is one ``skinet train`` of ``--base-config`` (default
``configs/main_config.yaml``) at ``--image-size`` (128) with ``TRAIN_CONFIG.max_time`` set to
the budget, then, on the run's best checkpoint:

- ``skinet evaluate --split val --external NAME=IMAGES:MASKS ...``: the validation split and
  every ``--external`` labelled folder (images from sources the model never trained on, such as
  another clinic's), mean per-image Jaccard at the original resolution, as ``skinet predict``
  produces it. Candidates are ranked by the **mean of set means**: each set's mean per-image
  Jaccard, averaged with every set counting once whatever its size (not a pooled per-image
  mean). Only cells scored on every set of their budget are ranked; a cell scored before an
  ``--external`` set was given is listed after them, marked, until ``--rescore`` scores it.
- ``skinet robustness --split val``: the synthetic shift report (``mean_shifted_jaccard``),
  printed beside it as a diagnostic. It does not rank: on a real other clinic's images it has
  picked the wrong recipe (``docs/results.md``).

A candidate is an option name or several joined by ``+`` (see ``--list``);
``--define NAME=KEY=VALUE[;KEY=VALUE]`` adds an option of your own. ``--rescore`` scores the
finished cells again (new ``--external`` sets, a changed shift report) without training.

Cells run seed by seed, every candidate in turn (baseline seed 1, candidate seed 1, baseline
seed 2, ...): a budgeted run's epochs follow the machine's speed, and a slow stretch then falls
on every arm. Each row records its training images per second next to its score.

Resumable: ``results.json``, ``results.csv`` and ``results.md`` (two-seed means, ready to paste
into ``docs/results.md``) in ``--output`` are rewritten after every cell, so a kill loses at
most the cell in progress; a restart skips finished cells and starts an unfinished one afresh.
Training runs with ``MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=2147483647`` (glibc then keeps
freed memory instead of page-faulting it back every step), the same for every cell.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from skinet.runtime.allocator import MALLOC_ENV

REPO = Path(__file__).resolve().parents[1]
ROBUST_TRANSFORMS = REPO / "configs" / "transforms_robust.yaml"
ROBUST = "robust_aug"
OPTIONS: dict[str, dict[str, Any]] = {
    "baseline": {},
    "instance": {"MODEL_CONFIG.norm": "instance"},
    "group": {"MODEL_CONFIG.norm": "group"},
    "shades_of_gray": {"DATA_CONFIG.color_constancy": "shades_of_gray"},
    "letterbox": {"DATA_CONFIG.resize_mode": "letterbox"},
    ROBUST: {},  # TRANSFORM_CONFIG of --robust-transforms, filled in by candidate_overrides
    "threshold_sweep": {"TRAIN_CONFIG.optimal_threshold": None},
    "cosine_budget": {
        "TRAIN_CONFIG.use_lr_scheduler": True,
        "TRAIN_CONFIG.scheduler_type": "cosine_budget",
    },
    "ema": {"TRAIN_CONFIG.use_ema": True},
}
"""Option name -> config overrides; a candidate joins options with ``+``."""
DEFAULT_CANDIDATES = ("baseline", "instance", "group", "shades_of_gray", "letterbox", ROBUST)
RESULTS_JSON, RESULTS_CSV, RESULTS_MD = "results.json", "results.csv", "results.md"


def parse_definitions(pairs: Sequence[str]) -> dict[str, dict[str, Any]]:
    """``["lr_high=TRAIN_CONFIG.lr=0.01;TRAIN_CONFIG.batch_size=4"]`` -> options (YAML values)."""
    options: dict[str, dict[str, Any]] = {}
    for pair in pairs:
        name, sep, body = pair.partition("=")
        if not sep or not name or "+" in name:
            raise SystemExit(f"--define expects NAME=SECTION.key=value[;...], got {pair!r}")
        overrides = {}
        for item in filter(None, (part.strip() for part in body.split(";"))):
            key, sep, value = item.partition("=")
            if not sep:
                raise SystemExit(f"--define {name}: expected SECTION.key=value, got {item!r}")
            overrides[key.strip()] = yaml.safe_load(value)
        options[name] = overrides
    return options


def candidate_overrides(
    candidate: str, options: dict[str, dict[str, Any]], robust_transforms: Path
) -> dict[str, Any]:
    """The overrides of every option in ``candidate`` (``a+b``); later options win."""
    overrides: dict[str, Any] = {}
    for name in candidate.split("+"):
        if name not in options:
            raise SystemExit(f"unknown option {name!r} in candidate {candidate!r}; see --list")
        if name == ROBUST:
            overrides.update(read_transform_section(robust_transforms))
        overrides.update(options[name])
    return overrides


def read_transform_section(path: Path) -> dict[str, Any]:
    """Every key of the ``TRANSFORM_CONFIG`` section of ``path`` as a dotted override."""
    if not path.is_file():
        raise SystemExit(f"{ROBUST}: transforms file not found: {path} (see --robust-transforms)")
    section = (yaml.safe_load(path.read_text()) or {}).get("TRANSFORM_CONFIG")
    if not isinstance(section, dict):
        raise SystemExit(f"{ROBUST}: {path} has no TRANSFORM_CONFIG mapping")
    return {f"TRANSFORM_CONFIG.{key}": value for key, value in section.items()}


def budget_tag(budget: str | None) -> str:
    """Folder and table name of a budget: ``15min`` for ``00:00:15:00``, ``epochs`` for none."""
    if budget is None:
        return "epochs"
    days, hours, minutes, seconds = (int(part) for part in budget.split(":"))
    total = ((days * 24 + hours) * 60 + minutes) * 60 + seconds
    return f"{total // 60}min" if total % 60 == 0 else f"{total}s"


def check_budget(text: str) -> str | None:
    """``DD:HH:MM:SS`` (Lightning's ``max_time``) or ``none`` (train for ``max_epochs``)."""
    if text.lower() == "none":
        return None
    parts = text.split(":")
    if len(parts) != 4 or not all(part.isdigit() for part in parts):
        raise argparse.ArgumentTypeError(f"budget must be DD:HH:MM:SS or none, got {text!r}")
    return text


def as_set(key: str, value: Any) -> list[str]:
    """``--set KEY=VALUE``, the value as JSON (valid YAML; ``00:00:05:00`` stays a string)."""
    return ["--set", f"{key}={json.dumps(value)}"]


def run_logged(command: list[str], log_path: Path, env: dict[str, str]) -> int:
    """Run ``command`` with stdout and stderr into ``log_path``; its exit status."""
    with log_path.open("w") as log:
        log.write(f"$ {shlex.join(command)}\n")
        log.flush()
        return subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, env=env).returncode


def run_cell(
    args: argparse.Namespace, candidate: str, seed: int, overrides: dict[str, Any]
) -> dict[str, Any]:
    """Train one cell from scratch and score its best checkpoint; the results row."""
    tag = budget_tag(args.budget)
    cell_dir = (args.output / "runs" / tag / candidate / f"seed{seed}").resolve()
    if cell_dir.exists():
        shutil.rmtree(cell_dir)  # an unfinished cell from a killed run: start it afresh
    cell_dir.mkdir(parents=True)
    row: dict[str, Any] = {"budget": tag, "candidate": candidate, "seed": seed, "status": "failed"}
    env = {**os.environ, **MALLOC_ENV}
    skinet = [sys.executable, "-m", "skinet.cli.main"]
    train = [*skinet, "train", "--config", str(args.base_config), "--no-visualize"]
    train += as_set("TRAIN_CONFIG.output_dir", str(cell_dir))
    train += as_set("TRAIN_CONFIG.seed", seed)
    train += as_set("TRAIN_CONFIG.enable_progress_bar", False)
    train += as_set("DATA_CONFIG.data_dir", str(args.data_dir.resolve()))
    train += as_set("DATA_CONFIG.image_size", args.image_size)
    if args.budget is not None:
        train += as_set("TRAIN_CONFIG.max_time", args.budget)
    for key, value in overrides.items():
        train += as_set(key, value)
    for pair in args.set or []:
        train += ["--set", pair]
    row["command"] = shlex.join(train)
    started = time.perf_counter()
    code = run_logged(train, cell_dir / "train.log", env)
    row["wall_seconds"] = round(time.perf_counter() - started, 1)
    runs = sorted(cell_dir.glob("*/metrics.json"), key=lambda p: p.stat().st_mtime)
    if code != 0 or not runs:
        row["error"] = f"skinet train exited {code}; see {cell_dir / 'train.log'}"
        return row
    trained = json.loads(runs[-1].read_text())
    checkpoint = trained.get("best_checkpoint")
    row.update(
        epochs=trained.get("epochs_trained"),
        fit_seconds=trained.get("fit_seconds"),
        train_images=_train_images(runs[-1].parent),
        monitor=trained.get("monitor"),
        monitor_value=trained.get("metrics", {}).get(trained.get("monitor")),
        checkpoint=checkpoint,
    )
    if row["train_images"] and row["epochs"] and row["fit_seconds"]:
        row["images_per_second"] = round(
            row["train_images"] * row["epochs"] / row["fit_seconds"], 2
        )
    if not checkpoint:
        row["error"] = "training wrote no best checkpoint (TRAIN_CONFIG.use_checkpoint?)"
        return row
    return score_cell(args, cell_dir, row)


def _train_images(run_dir: Path) -> int | None:
    """Training images of a run, from its ``splits.csv``."""
    splits = run_dir / "splits.csv"
    if not splits.is_file():
        return None
    with splits.open() as handle:
        return sum(1 for line in csv.DictReader(handle) if line.get("split") == "train")


def score_cell(args: argparse.Namespace, cell_dir: Path, row: dict[str, Any]) -> dict[str, Any]:
    """Score a trained cell's checkpoint on val + external sets, then the shift report."""
    # In this process: inference needs no isolation, and it saves an interpreter start per cell.
    from skinet.cli.main import main as skinet_main

    checkpoint = row["checkpoint"]
    common = ["--checkpoint", checkpoint, "--device", args.device]
    evaluate_dir, report_dir = cell_dir / "evaluate", cell_dir / "robustness"
    evaluate = ["evaluate", *common, "--split", "val", "--gallery", "0"]
    evaluate += ["--output", str(evaluate_dir)]
    for external in args.external:
        evaluate += ["--external", external]
    robustness = ["robustness", *common, "--split", "val", "--output", str(report_dir)]
    commands = [(evaluate, evaluate_dir / "summary.json")]
    if args.shift_report:
        commands.append((robustness, report_dir / "robustness.json"))
    for command, summary_path in commands:
        summary_path.unlink(missing_ok=True)
        try:
            code = skinet_main(command)
        except Exception as error:  # a failed cell is recorded; the study goes on
            code, row["error"] = -1, f"skinet {command[0]} failed: {error!r}"
        if code not in (0, 1) or not summary_path.is_file():
            row.setdefault("error", f"skinet {command[0]} exited {code}")
            row["status"] = "failed"
            return row
    clean = json.loads((evaluate_dir / "summary.json").read_text())
    externals = {
        name: json.loads((evaluate_dir / name / "summary.json").read_text())
        for name in external_names(args.external)
    }
    summary: dict[str, Any] = {"mean_shifted_jaccard": None, "mean_drop": None, "num_failed": 0}
    if args.shift_report:
        summary = json.loads((report_dir / "robustness.json").read_text())
    real = [clean["mean_jaccard"], *(s["mean_jaccard"] for s in externals.values())]
    row.update(
        status="done",
        clean_val_jaccard=clean["mean_jaccard"],
        val_area_ratio=clean.get("median_area_ratio"),
        external_jaccard={name: s["mean_jaccard"] for name, s in externals.items()},
        external_area_ratio={name: s.get("median_area_ratio") for name, s in externals.items()},
        real_mean_jaccard=statistics.fmean(real),
        shifted_mean_jaccard=summary["mean_shifted_jaccard"],
        mean_drop=summary["mean_drop"],
        worst_condition=summary.get("worst_condition"),
        num_images=clean["num_images"],
        num_failed=clean["num_failed"] + summary["num_failed"],
        threshold=clean.get("threshold"),
        finished_at=datetime.now(UTC).isoformat(timespec="seconds"),
    )
    row.pop("error", None)
    return row


def external_names(pairs: Sequence[str]) -> list[str]:
    """The names of ``--external NAME=IMAGES:MASKS`` values (checked by ``external_set``)."""
    from skinet.cli.arguments import external_set

    return [external_set(pair).name for pair in pairs]


def cell_key(tag: str, candidate: str, seed: int) -> str:
    """The row's key in ``results.json``."""
    return f"{tag}/{candidate}/seed{seed}"


def load_results(output: Path) -> dict[str, dict[str, Any]]:
    """Rows by :func:`cell_key` of an earlier run, or nothing."""
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
    columns += ["images_per_second", "wall_seconds", "monitor_value", "threshold", "checkpoint"]
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


def _figure(value: float | None, digits: int = 4) -> str:
    return "" if value is None else f"{value:.{digits}f}"


def markdown_table(cells: dict[str, dict[str, Any]]) -> str:
    """The study table: one line per (budget, candidate), ranked as :func:`summarise` ranks."""
    rows = summarise(cells)
    names = sorted({name for row in rows for name in row["externals"]})
    lines = [
        "| budget | candidate | seeds | mean of set means | val Jaccard | "
        + "".join(f"{name} | " for name in names)
        + "Δ mean of sets | val area ratio | shift report (diagnostic) | Δ shifted | epochs | "
        "images/s | per seed (val / epochs / images/s) |",
        "|---|---|---|---|---|" + "---|" * len(names) + "---|---|---|---|---|---|---|",
    ]
    for row in rows:
        per_seed = "; ".join(
            f"{val:.4f} / {epochs} / {_figure(speed, 1)}" for val, epochs, speed in row["per_seed"]
        )
        seeds = ",".join(str(s) for s in row["seeds"])
        externals = "".join(f"{_figure(row['externals'].get(name))} | " for name in names)
        candidate = row["candidate"]
        if row["missing_sets"]:
            candidate += f" (not ranked: not scored on {', '.join(row['missing_sets'])})"
        lines.append(
            f"| {row['budget']} | {candidate} | {seeds} | {row['real']:.4f} | "
            f"{row['clean']:.4f} | {externals}{_signed(row['d_real'])} | "
            f"{_figure(row['area_ratio'], 2)} | {_figure(row['shifted'])} | "
            f"{_signed(row['d_shifted'])} | {row['epochs']:.1f} | "
            f"{_figure(row['images_per_second'], 1)} | {per_seed} |"
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
        "a budgeted run's epochs follow the machine's speed.\n"
    )
    return "\n".join(lines) + "\n" + note


def cell_scores(output: Path, row: dict[str, Any]) -> dict[str, dict[str, float]]:
    """Per-image Jaccard of a finished cell by set (``val`` and each external), read from the
    ``per_image.csv`` files its ``skinet evaluate`` wrote."""
    evaluate = output / "runs" / row["budget"] / row["candidate"] / f"seed{row['seed']}"
    evaluate /= "evaluate"
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


def build_parser() -> argparse.ArgumentParser:
    """The script's options."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--output", type=Path, help="folder of runs and results (required)")
    parser.add_argument("--data-dir", type=Path, help="the ISIC 2017 folder (official layout)")
    parser.add_argument(
        "--base-config",
        type=Path,
        default=REPO / "configs" / "main_config.yaml",
        help="the config every candidate starts from (default configs/main_config.yaml)",
    )
    parser.add_argument(
        "--budget",
        type=check_budget,
        default="00:00:15:00",
        help="TRAIN_CONFIG.max_time per run, DD:HH:MM:SS, or none (default 00:00:15:00)",
    )
    parser.add_argument(
        "--candidates",
        default=",".join(DEFAULT_CANDIDATES),
        help="comma-separated candidates; options joined by + combine (default: each option)",
    )
    parser.add_argument("--seeds", default="1,2", help="comma-separated TRAIN_CONFIG.seed values")
    parser.add_argument("--image-size", type=int, default=128, help="DATA_CONFIG.image_size")
    parser.add_argument("--device", default="auto", help="device of skinet robustness")
    parser.add_argument(
        "--robust-transforms",
        type=Path,
        default=ROBUST_TRANSFORMS,
        help=f"TRANSFORM_CONFIG of the {ROBUST} option (default configs/transforms_robust.yaml)",
    )
    parser.add_argument(
        "--define",
        action="append",
        default=[],
        metavar="NAME=SECTION.KEY=VALUE[;...]",
        help="add an option of your own (repeatable)",
    )
    parser.add_argument(
        "--set", action="append", metavar="SECTION.KEY=VALUE", help="override for every run"
    )
    parser.add_argument(
        "--external",
        action="append",
        default=[],
        metavar="NAME=IMAGES:MASKS",
        help="a labelled folder from a source the model never trained on; every cell is scored "
        "on it, and candidates are ranked by the mean over validation and these (repeatable)",
    )
    parser.add_argument(
        "--rescore",
        action="store_true",
        help="score the finished cells again (e.g. with new --external sets), without training",
    )
    parser.add_argument(
        "--no-shift-report",
        dest="shift_report",
        action="store_false",
        help="skip skinet robustness (the synthetic shift report) after each cell",
    )
    parser.add_argument("--table", action="store_true", help="print the table and exit")
    parser.add_argument("--list", action="store_true", help="list the options and exit")
    return parser


def _print_options(options: dict[str, dict[str, Any]], robust_transforms: Path) -> None:
    """``--list``: the options a candidate can combine."""
    for name, overrides in options.items():
        shown = f"TRANSFORM_CONFIG of {robust_transforms}" if name == ROBUST else overrides
        print(f"{name}: {shown or 'the base config as it is'}")


def _check_inputs(args: argparse.Namespace) -> None:
    """The data folder and every external folder, checked before the first cell trains."""
    if args.data_dir is None or not args.data_dir.is_dir():
        raise SystemExit(f"--data-dir must be an existing folder, got {args.data_dir}")
    from skinet.cli.arguments import external_set

    for pair in args.external:
        try:
            external_set(pair)
        except argparse.ArgumentTypeError as error:
            raise SystemExit(f"--external: {error}") from None


def _run_or_score(
    args: argparse.Namespace,
    cells: dict[str, dict[str, Any]],
    key: str,
    cell: tuple[str, int, str],
    overrides: dict[str, Any],
) -> dict[str, Any] | None:
    """Train the cell, score it again (``--rescore``), or None when it finished earlier."""
    tag, candidate, seed = cell
    done = cells.get(key, {}).get("status") == "done"
    if done and args.rescore:
        print(f"[score] {key} ...", flush=True)
        cell_dir = (args.output / "runs" / tag / candidate / f"seed{seed}").resolve()
        return score_cell(args, cell_dir, dict(cells[key]))
    if done:
        print(f"[skip] {key}: finished earlier")
        return None
    print(f"[run]  {key} ...", flush=True)
    return run_cell(args, candidate, seed, overrides)


def _report_cell(key: str, row: dict[str, Any]) -> bool:
    """Print how one cell ended; whether it failed."""
    if row["status"] != "done":
        print(f"[fail] {key}: {row['error']}")
        return True
    print(
        f"[done] {key}: mean of set means {row['real_mean_jaccard']:.4f} (val "
        f"{row['clean_val_jaccard']:.4f}), shift report "
        f"{_figure(row['shifted_mean_jaccard'])}, {row['epochs']} epochs at "
        f"{_figure(row.get('images_per_second'), 1)} images/s"
    )
    return False


def _run_plan(
    args: argparse.Namespace, cells: dict[str, dict[str, Any]], options: dict[str, dict[str, Any]]
) -> int:
    """Run every unfinished cell of the plan, saving after each; the number that failed."""
    candidates = [c.strip() for c in args.candidates.split(",") if c.strip()]
    seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    plan = {c: candidate_overrides(c, options, args.robust_transforms) for c in candidates}
    tag, failed = budget_tag(args.budget), 0
    # Seed by seed, every candidate in turn: a slow stretch of the machine falls on every arm,
    # not on whichever candidate happened to run then (a budgeted run's epochs follow it).
    for seed in seeds:
        for candidate, overrides in plan.items():
            key = cell_key(tag, candidate, seed)
            row = _run_or_score(args, cells, key, (tag, candidate, seed), overrides)
            if row is None:
                continue
            cells[key] = row
            save_results(args.output, cells)
            if _report_cell(key, row):
                failed += 1
    return failed


def main(argv: Sequence[str] | None = None) -> int:
    """Run every unfinished cell; 1 if any cell failed."""
    args = build_parser().parse_args(argv)
    options = {**OPTIONS, **parse_definitions(args.define)}
    if args.list:
        _print_options(options, args.robust_transforms)
        return 0
    if args.output is None:
        raise SystemExit("--output is required (the folder of runs and results)")
    args.output.mkdir(parents=True, exist_ok=True)
    cells = load_results(args.output)
    if args.table:
        print(markdown_table(cells))
        print(compare_with_baseline(args.output, cells))
        return 0
    _check_inputs(args)
    failed = _run_plan(args, cells, options)
    save_results(args.output, cells)
    print(markdown_table(cells))
    print(compare_with_baseline(args.output, cells))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
