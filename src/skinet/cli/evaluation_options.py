"""``skinet evaluate``'s options: the parser of the command that :mod:`skinet.cli.evaluation` runs.

Imports nothing heavy: the choices come from :mod:`skinet.evaluation.options`, so
``skinet evaluate --help`` loads neither numpy nor torch.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from skinet.cli.arguments import (
    add_data_dir_options,
    add_option,
    external_set,
    non_negative_int,
    positive_float,
)
from skinet.cli.evaluation import run_evaluate
from skinet.cli.inference import CHECKPOINTS, add_leak_option, add_model_options
from skinet.evaluation.options import GALLERY_ORDERS, SPLIT_CHOICES


class _OneOrTwoValues(argparse.Action):
    """``--pixel-spacing-mm S`` (isotropic) or ``--pixel-spacing-mm ROW COL``."""

    def __call__(
        self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any, *_: Any
    ) -> None:
        if len(values) > 2:
            parser.error(f"{self.option_strings[0]} takes one value (isotropic) or two (row, col)")
        setattr(namespace, self.dest, values)


def add_evaluate_subcommand(subparsers: Any) -> None:
    """Register ``evaluate`` (``func``: its handler)."""
    evaluate = subparsers.add_parser(
        "evaluate", help="per-image Jaccard/Dice of a checkpoint or of predicted masks"
    )
    evaluate.add_argument("--checkpoint", **CHECKPOINTS)
    evaluate.add_argument(
        "--tune-threshold",
        action="store_true",
        help="pick the Dice-optimal threshold on --split (or --images), print it, score with it",
    )
    evaluate.add_argument(
        "--threshold-selection",
        choices=("pooled_dice", "per_image", "guarded"),
        default="pooled_dice",
        help="how --tune-threshold chooses: the best pooled Dice (default), the best mean "
        "per-image Jaccard, or that only when its gain over the model's own threshold is clear "
        "(guarded: a 95%% paired bootstrap interval over the images above 0)",
    )
    evaluate.add_argument(
        "--tune-tta",
        action="store_true",
        help="with --tune-threshold: also decide flips at prediction time (--tta) on these "
        "images, each way at its own tuned threshold; flips only when their gain is clear (a "
        "95%% paired bootstrap interval over the images above 0). --save-calibrated keeps the "
        "choice",
    )
    evaluate.add_argument(
        "--save-calibrated",
        type=Path,
        metavar="CKPT",
        help="with --tune-threshold: write a copy of the checkpoint that carries the tuned "
        "threshold (predict, evaluate and export use it) and its model card",
    )
    evaluate.add_argument(
        "--overwrite",
        action="store_true",
        help="let --save-calibrated replace an existing file and its model card",
    )
    add_data_dir_options(evaluate, "the checkpoint")
    evaluate.add_argument(
        "--split",
        choices=(*SPLIT_CHOICES, "none"),
        help="split of --data-dir to score (default test; none: only --external); not with "
        "--images",
    )
    evaluate.add_argument(
        "-i", "--images", type=Path, help="a labelled folder of images (instead of a split)"
    )
    add_option(
        evaluate,
        "--masks",
        hidden=("--ground-truth",),
        type=Path,
        help="ground-truth masks of --images or of --predictions, paired by image ID (stem "
        "without _mask, ...)",
    )
    evaluate.add_argument(
        "--external",
        action="append",
        default=[],
        type=external_set,
        metavar="NAME=IMAGES:MASKS",
        help="also score this labelled folder, into OUTPUT/NAME (repeatable); a table compares "
        "every set",
    )
    evaluate.add_argument(
        "--predictions", type=Path, help="folder of predicted masks to score against --masks"
    )
    evaluate.add_argument("-o", "--output", required=True, type=Path, help="folder for the reports")
    evaluate.add_argument(
        "--pixel-spacing-mm",
        nargs="+",
        type=positive_float,
        action=_OneOrTwoValues,
        metavar="MM",
        help="millimetres per pixel (one value, or row and column): adds hd95_mm and assd_mm",
    )
    evaluate.add_argument(
        "--gallery",
        type=non_negative_int,
        default=8,
        metavar="N",
        help="draw the N worst images to failure_gallery.png (0: none; default 8)",
    )
    evaluate.add_argument(
        "--gallery-order",
        choices=GALLERY_ORDERS,
        default="jaccard",
        help="worst by lowest Jaccard, or by area ratio farthest from 1 (a dilated or shrunk "
        "contour)",
    )
    add_model_options(evaluate)
    add_leak_option(evaluate)

    evaluate.set_defaults(func=run_evaluate)
