"""``skinet sweep``, ``skinet seeds`` and ``skinet ablation``: argument parsing only."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from skinet.config import positive_int

Handler = Callable[[argparse.Namespace], int]


def _add_config_arguments(parser: argparse.ArgumentParser) -> None:
    from skinet.cli import add_config_arguments

    add_config_arguments(parser)


def _load(args: argparse.Namespace, extra: dict[str, Any] | None = None) -> Any:
    from skinet.cli import parse_overrides
    from skinet.config import load_config

    return load_config(args.config, {**parse_overrides(args.set or []), **(extra or {})})


def run_sweep_command(args: argparse.Namespace) -> int:
    """``skinet sweep``: run or join the Optuna grid sweep."""
    from skinet.sweep.reports import print_table
    from skinet.sweep.study import objective_overrides, run_sweep

    cfg = _load(args, objective_overrides(args.monitor, args.direction))
    result = run_sweep(
        cfg,
        n_trials=args.trials,
        storage_url=args.storage,
        study_name=args.study_name,
        heartbeat_interval=args.heartbeat_interval,
        grace_period=args.grace_period,
    )
    rows: list[dict[str, Any]] = [
        {"trial": n, "state": "FAIL", "error": e[:80]} for n, e in sorted(result.failed.items())
    ]
    print_table(
        f"Sweep {result.study_name}: {len(result.completed)} complete, "
        f"{len(result.failed)} failed of {result.n_queued} grid point(s)",
        [
            {"": "best trial", "value": result.best_trial},
            {"": f"best {result.monitor}", "value": result.best_value},
            *({"": f"best {k}", "value": v} for k, v in (result.best_params or {}).items()),
            {"": "storage", "value": result.storage},
            {"": "plot", "value": str(result.plot_path)},
        ],
    )
    if rows:
        print_table("Failed trials", rows)
    return 0 if result.completed else 1


def run_seeds_command(args: argparse.Namespace) -> int:
    """``skinet seeds``: one run per seed and a mean/std summary."""
    from skinet.sweep.seeds import run_seeds

    run_seeds(_load(args), args.seeds)
    return 0


def run_ablation_command(args: argparse.Namespace) -> int:
    """``skinet ablation``: every encoder x merge residual-mode combination."""
    from skinet.sweep.ablation import run_ablation

    result = run_ablation(_load(args), args.encoder_modes, args.merge_modes)
    print(f"results: {result.csv_path} and {result.markdown_path}")
    return 0


def add_sweep_subcommands(subparsers: Any) -> None:
    """Register ``sweep``, ``seeds`` and ``ablation``; each sets ``func`` to its handler."""
    sweep = subparsers.add_parser(
        "sweep",
        help="Optuna grid search over SWEEP_CONFIG (resumable; several workers may share it)",
        description=(
            "Run the Cartesian product of the SWEEP_CONFIG lists as one Optuna study. Workers "
            "started with the same --storage and --study-name share the grid; a sweep "
            "restarted with them runs only the points not yet complete."
        ),
    )
    _add_config_arguments(sweep)
    sweep.add_argument(
        "--monitor",
        help="metric to optimise (default: $SWEEP_MONITOR, else SWEEP_CONFIG.monitor)",
    )
    sweep.add_argument(
        "--direction",
        choices=("maximize", "minimize"),
        help="default: $SWEEP_DIRECTION, else SWEEP_CONFIG.direction",
    )
    sweep.add_argument(
        "--trials", type=positive_int, metavar="N", help="run only the first N points of the grid"
    )
    sweep.add_argument(
        "--storage",
        metavar="URL",
        help="Optuna RDB storage URL (default: sqlite:///<output_dir>/optuna.db)",
    )
    sweep.add_argument("--study-name", help="Optuna study (default: {experiment_name}_{monitor})")
    sweep.add_argument(
        "--heartbeat-interval",
        type=int,
        default=60,
        metavar="S",
        help="seconds between heartbeats of a running trial (default: 60)",
    )
    sweep.add_argument(
        "--grace-period",
        type=int,
        metavar="S",
        help="seconds without heartbeat before a trial is retried (default: 2 x heartbeat)",
    )

    seeds = subparsers.add_parser(
        "seeds", help="train once per seed and summarise mean and std of the metrics"
    )
    _add_config_arguments(seeds)
    seeds.add_argument(
        "--seeds", type=int, nargs="+", required=True, metavar="SEED", help="e.g. 42 200 300"
    )

    from skinet.sweep.ablation import ENCODER_MODES, MERGE_MODES

    ablation = subparsers.add_parser(
        "ablation", help="train every encoder x merge residual-mode combination"
    )
    _add_config_arguments(ablation)
    ablation.add_argument(
        "--encoder-modes",
        nargs="+",
        choices=ENCODER_MODES,
        metavar="MODE",
        help=f"encoder residual modes (default: all of {', '.join(ENCODER_MODES)})",
    )
    ablation.add_argument(
        "--merge-modes",
        nargs="+",
        choices=MERGE_MODES,
        metavar="MODE",
        help=f"merge residual modes (default: all of {', '.join(MERGE_MODES)})",
    )
    sweep.set_defaults(func=run_sweep_command)
    seeds.set_defaults(func=run_seeds_command)
    ablation.set_defaults(func=run_ablation_command)
