"""``skinet sweep``, ``seeds``, ``ablation`` and ``cv``: argument parsing only."""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, get_args

from skinet.checkpoints.cv_folder import CV_SUMMARY_FILE, CV_TABLE_FILE
from skinet.cli.arguments import (
    add_config_arguments,
    add_init_from_option,
    load_config_from_args,
    parse_overrides,
    positive_int,
)
from skinet.cli.extras import SWEEP_MODULES, TRAINING_MODULES, requires
from skinet.config.errors import UsageError

if TYPE_CHECKING:
    from skinet.config.experiment import ExperimentConfig

MONITOR_ENV, DIRECTION_ENV = "SWEEP_MONITOR", "SWEEP_DIRECTION"


def objective_overrides(
    monitor: str | None = None,
    direction: str | None = None,
    environ: Mapping[str, str] | None = None,
    set_overrides: Mapping[str, Any] | None = None,
) -> dict[str, str]:
    """Config overrides for the objective of ``skinet sweep``.

    Precedence, highest first: the ``--monitor``/``--direction`` flag, a ``--set
    SWEEP_CONFIG.monitor=...``/``direction`` (already in ``set_overrides``, so not repeated
    here), the ``SWEEP_MONITOR``/``SWEEP_DIRECTION`` environment variable, the YAML.
    """
    environ = os.environ if environ is None else environ
    set_overrides = set_overrides or {}
    overrides = {}
    for field, flag, variable in (
        ("monitor", monitor, MONITOR_ENV),
        ("direction", direction, DIRECTION_ENV),
    ):
        dotted = f"SWEEP_CONFIG.{field}"
        from_env = None if dotted in set_overrides else environ.get(variable)
        chosen = flag or from_env or None
        if chosen:
            overrides[dotted] = chosen
    return overrides


def _add_config_arguments(parser: argparse.ArgumentParser) -> None:
    add_config_arguments(parser)


def _load(args: argparse.Namespace) -> ExperimentConfig:
    return load_config_from_args(args)


def load_sweep_config(args: argparse.Namespace) -> ExperimentConfig:
    """The config of ``skinet sweep``: ``--set`` overrides, then the objective's precedence."""
    from skinet.augment.checks import check_config
    from skinet.config.experiment import load_config

    overrides = parse_overrides(args.set or [])
    overrides.update(objective_overrides(args.monitor, args.direction, None, overrides))
    return check_config(load_config(args.config, overrides), str(args.config))


@requires(*SWEEP_MODULES)
def run_sweep_command(args: argparse.Namespace) -> int:
    """``skinet sweep``: run or join the Optuna grid sweep."""
    from skinet.experiments.study import run_sweep
    from skinet.experiments.summary import print_table

    cfg = load_sweep_config(args)
    result = run_sweep(
        cfg,
        n_trials=args.trials,
        storage_url=args.storage,
        study_name=args.study_name,
        heartbeat_interval=args.heartbeat_interval,
        grace_period=args.grace_period,
        retry_failed=not args.no_retry_failed,
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
        print_table("Failed grid points (last trial of each)", rows)
    if result.finished:
        return 0
    print(
        f"{result.n_queued - len(result.completed)} grid point(s) did not complete; run the same "
        "command again to retry the failed ones"
    )
    return 1


@requires(*TRAINING_MODULES)
def run_seeds_command(args: argparse.Namespace) -> int:
    """``skinet seeds``: one run per seed and a mean/std summary."""
    from skinet.experiments.seeds import run_seeds

    summary = run_seeds(_load(args), args.seeds)
    for seed, run_dir in summary.run_dirs.items():
        print(f"seed {seed}: {run_dir}")
    print(f"summary: {summary.json_path} and {summary.markdown_path}")
    return 0


@requires(*TRAINING_MODULES)
def run_ablation_command(args: argparse.Namespace) -> int:
    """``skinet ablation``: every encoder x merge residual-mode combination."""
    from skinet.experiments.ablation import run_ablation

    result = run_ablation(_load(args), args.encoder_modes, args.merge_modes)
    print(f"results: {result.csv_path} and {result.markdown_path}")
    return 0


@requires(*TRAINING_MODULES)
def run_cv_command(args: argparse.Namespace) -> int:
    """``skinet cv``: k-fold cross-validation, resumable."""
    from skinet.experiments.cv import run_cv

    cfg = _load(args)
    if args.tune_tta and cfg.train.optimal_threshold is not None:
        raise UsageError(
            "--tune-tta decides flips together with the ensemble's threshold, which "
            f"TRAIN_CONFIG.optimal_threshold fixes at {cfg.train.optimal_threshold}: set it "
            "to null, or leave out --tune-tta"
        )
    result = run_cv(cfg, args.folds, tune_tta=args.tune_tta)
    if result.skipped:
        print(f"folds already finished and not retrained: {result.skipped}")
    print(f"results: {result.cv_dir / CV_TABLE_FILE} and {result.cv_dir / CV_SUMMARY_FILE}")
    return 0


def add_experiment_subcommands(subparsers: Any) -> None:
    """Register ``sweep``, ``seeds``, ``ablation`` and ``cv``; each sets ``func`` to its handler."""
    sweep = subparsers.add_parser(
        "sweep",
        help="Optuna grid search over SWEEP_CONFIG (resumable; several workers may share it)",
        description=(
            "Run the Cartesian product of the SWEEP_CONFIG lists as one Optuna study. Workers "
            "started with the same --storage and --study-name share the grid; a sweep "
            "restarted with them runs only the points not yet complete, failed ones included. "
            "Exits 1 while grid points remain failed."
        ),
    )
    _add_config_arguments(sweep)
    sweep.add_argument(
        "--monitor",
        help="metric to optimise (default: --set SWEEP_CONFIG.monitor, else $SWEEP_MONITOR, "
        "else the YAML's SWEEP_CONFIG.monitor)",
    )
    sweep.add_argument(
        "--direction",
        choices=("maximize", "minimize"),
        help="default: --set SWEEP_CONFIG.direction, else $SWEEP_DIRECTION, else the YAML's",
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
    sweep.add_argument(
        "--no-retry-failed",
        action="store_true",
        help="on a restart, leave grid points whose trials all failed as they are",
    )

    seeds = subparsers.add_parser(
        "seeds", help="train once per seed and summarise mean and std of the metrics"
    )
    _add_config_arguments(seeds)
    seeds.add_argument(
        "--seeds", type=int, nargs="+", required=True, metavar="SEED", help="e.g. 42 200 300"
    )

    from skinet.config.model import EncoderResidualMode, MergeResidualMode

    # The modes come from the config schema: importing the ablation would import MLflow.
    encoder_modes, merge_modes = get_args(EncoderResidualMode), get_args(MergeResidualMode)

    ablation = subparsers.add_parser(
        "ablation", help="train every encoder x merge residual-mode combination"
    )
    _add_config_arguments(ablation)
    ablation.add_argument(
        "--encoder-modes",
        nargs="+",
        choices=encoder_modes,
        metavar="MODE",
        help=f"encoder residual modes (default: all of {', '.join(encoder_modes)})",
    )
    ablation.add_argument(
        "--merge-modes",
        nargs="+",
        choices=merge_modes,
        metavar="MODE",
        help=f"merge residual modes (default: all of {', '.join(merge_modes)})",
    )
    cv = subparsers.add_parser(
        "cv",
        help="k-fold cross-validation: one model per fold, mean and std (resumable)",
        description=(
            "Pool the training and validation splits, cut them into --folds folds by "
            "DATA_CONFIG.split_random_seed and train one model per fold, each tested on the "
            "unchanged test split. Results go to <output_dir>/cv_<experiment_name>_k<folds>; "
            "run the same command again after an interruption and finished folds are skipped."
        ),
    )
    _add_config_arguments(cv)
    add_init_from_option(cv)
    cv.add_argument("--folds", type=positive_int, default=5, metavar="K", help="(default: 5)")
    cv.add_argument(
        "--tune-tta",
        action="store_true",
        help="also decide flips at prediction time for the folds' ensemble: tune its threshold "
        "on the out-of-fold images with and without them, keep them only when their gain is "
        "clear (as evaluate --tune-tta); each image is read once and predicted both ways, "
        "4x the model compute with flips. Run again on a "
        "finished cv to decide without retraining",
    )
    cv.set_defaults(func=run_cv_command)
    sweep.set_defaults(func=run_sweep_command)
    seeds.set_defaults(func=run_seeds_command)
    ablation.set_defaults(func=run_ablation_command)
