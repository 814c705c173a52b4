"""The cells of the recipe study: a candidate's overrides, one training run, its scores.

A cell is one candidate x seed x budget: ``skinet train`` of the base config with the
candidate's overrides in its own folder (``<output>/runs/<budget>/<candidate>/seed<N>``), then
``skinet evaluate`` (and, if asked, ``skinet robustness``) on its best checkpoint. The row it
returns is what ``study_tables`` saves and tabulates.
"""

from __future__ import annotations

import argparse
import csv
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


def cell_key(tag: str, candidate: str, seed: int) -> str:
    """The row's key in ``results.json``."""
    return f"{tag}/{candidate}/seed{seed}"


def cell_dir(output: Path, tag: str, candidate: str, seed: int) -> Path:
    """The folder of one cell's training run and scores."""
    return (output / "runs" / tag / candidate / f"seed{seed}").resolve()


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
    folder = cell_dir(args.output, tag, candidate, seed)
    if folder.exists():
        shutil.rmtree(folder)  # an unfinished cell from a killed run: start it afresh
    folder.mkdir(parents=True)
    row: dict[str, Any] = {"budget": tag, "candidate": candidate, "seed": seed, "status": "failed"}
    env = {**os.environ, **MALLOC_ENV}
    skinet = [sys.executable, "-m", "skinet.cli.main"]
    train = [*skinet, "train", "--config", str(args.base_config), "--no-visualize"]
    train += as_set("TRAIN_CONFIG.output_dir", str(folder))
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
    started, counters = time.perf_counter(), cpu_times()
    code = run_logged(train, folder / "train.log", env)
    row["wall_seconds"] = round(time.perf_counter() - started, 1)
    row["cpu_steal"] = steal_share(counters, cpu_times())
    runs = sorted(folder.glob("*/metrics.json"), key=lambda p: p.stat().st_mtime)
    if code != 0 or not runs:
        row["error"] = f"skinet train exited {code}; see {folder / 'train.log'}"
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
    return score_cell(args, folder, row)


def cpu_times() -> list[int] | None:
    """The machine's CPU time counters, the first line of ``/proc/stat`` (Linux); ``None``
    where there is none."""
    try:
        with open("/proc/stat") as handle:
            fields = handle.readline().split()
    except OSError:
        return None
    if len(fields) < 9 or fields[0] != "cpu":
        return None
    return [int(value) for value in fields[1:]]


def steal_share(before: list[int] | None, after: list[int] | None) -> float | None:
    """The share of the CPU time between two :func:`cpu_times` that a virtual machine's host
    gave to other guests (``steal``): the arms of a study compare fairly only when it is alike,
    since a budgeted run's epochs follow the CPU it gets."""
    if before is None or after is None:
        return None
    # user, nice, system, idle, iowait, irq, softirq, steal; guest time is inside user and nice
    spent = [later - earlier for earlier, later in zip(before[:8], after[:8], strict=True)]
    total = sum(spent)
    return round(spent[7] / total, 3) if total > 0 else None


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
