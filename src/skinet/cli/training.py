"""``skinet train``: argument parsing and one call to the training entry point."""

from __future__ import annotations

import argparse
from typing import Any

from skinet.cli.arguments import (
    add_config_arguments,
    add_init_from_option,
    load_config_from_args,
)
from skinet.cli.extras import TRAINING_MODULES, requires


@requires(*TRAINING_MODULES)
def _run_train(args: argparse.Namespace) -> int:
    from skinet.cli.summary import print_run_summary
    from skinet.training.run import run_training

    cfg = load_config_from_args(args)
    result = run_training(cfg, visualize=not args.no_visualize, resume=args.resume, checked=True)
    print_run_summary(cfg, result)
    return 0


def add_training_subcommands(subparsers: Any) -> None:
    """Register ``train``; it sets ``func`` to its handler."""
    train = subparsers.add_parser("train", help="train, validate and test one model")
    add_config_arguments(train)
    train.add_argument(
        "--resume", metavar="PATH|last", help="continue from a checkpoint, or the newest last.ckpt"
    )
    add_init_from_option(train)
    train.add_argument(
        "--no-visualize", action="store_true", help="skip the augmented-samples grid"
    )
    train.set_defaults(func=_run_train)
