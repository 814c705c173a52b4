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
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from study_cells import (  # noqa: E402
    DEFAULT_CANDIDATES,
    OPTIONS,
    REPO,
    ROBUST,
    ROBUST_TRANSFORMS,
    budget_tag,
    candidate_overrides,
    cell_dir,
    cell_key,
    parse_definitions,
    run_cell,
    score_cell,
)
from study_tables import (  # noqa: E402
    compare_with_baseline,
    figure,
    load_results,
    markdown_table,
    percent,
    save_results,
)


def check_budget(text: str) -> str | None:
    """``DD:HH:MM:SS`` (Lightning's ``max_time``) or ``none`` (train for ``max_epochs``)."""
    if text.lower() == "none":
        return None
    parts = text.split(":")
    if len(parts) != 4 or not all(part.isdigit() for part in parts):
        raise argparse.ArgumentTypeError(f"budget must be DD:HH:MM:SS or none, got {text!r}")
    return text


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
        folder = cell_dir(args.output, tag, candidate, seed)
        return score_cell(args, folder, dict(cells[key]))
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
    steal = row.get("cpu_steal")
    print(
        f"[done] {key}: mean of set means {row['real_mean_jaccard']:.4f} (val "
        f"{row['clean_val_jaccard']:.4f}), shift report "
        f"{figure(row['shifted_mean_jaccard'])}, {row['epochs']} epochs at "
        f"{figure(row.get('images_per_second'), 1)} images/s"
        + ("" if steal is None else f", {percent(steal)} of the CPU stolen")
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
