"""``skinet robustness``: argument parsing only."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path
from typing import Any

from skinet.cli import inference as model_options
from skinet.cli.arguments import add_data_dir_options, check_output_folder
from skinet.cli.evaluation import recorded_split, refuse_leak
from skinet.evaluation.options import SPLIT_CHOICES

log = logging.getLogger("skinet")


def run_robustness(args: argparse.Namespace) -> int:
    """Score a checkpoint clean and under every device shift; 2 on a usage error."""
    from skinet.evaluation.evaluate import select_samples
    from skinet.evaluation.mask_folders import pair_image_folder
    from skinet.evaluation.robustness import (
        evaluate_under_shifts,
        print_robustness_table,
        write_robustness,
    )
    from skinet.evaluation.shifts import select_shifts

    check_output_folder(args.output)
    if (args.images is None) != (args.masks is None):
        log.error("--images and --masks go together")
        return 2
    if args.images is not None and (args.data is not None or args.dataset is not None):
        log.error("use --images with --masks, or --data-dir/--dataset/--split (not both)")
        return 2
    try:
        shifts = select_shifts(args.shifts)
    except ValueError as error:
        log.error("--shifts: %s", error)
        return 2
    predictor = model_options.build_predictor(args)
    if args.images is not None:
        samples = pair_image_folder(args.images, args.masks)
        where = {"images": str(args.images), "masks": str(args.masks)}
    else:
        refuse_leak(predictor, args)
        samples = select_samples(
            predictor.config, args.data, args.dataset, args.split, recorded_split(args)
        )
        where = {"split": args.split}
    log.info("%d image(s) x %d conditions (seed %d)", len(samples), len(shifts) + 1, args.seed)
    result = evaluate_under_shifts(predictor, samples, shifts, seed=args.seed)
    result.info.update(
        checkpoint=model_options.checkpoint_info(args),
        **where,
        threshold=predictor.threshold,
        image_size=predictor.image_size,
        tta=predictor.tta,
        keep_largest=args.keep_largest,
        fill_holes=args.fill_holes,
    )
    paths = write_robustness(result, args.output)
    print_robustness_table(result)
    log.info("wrote %s", ", ".join(str(p) for p in paths.values()))
    model_options.report_failures(result.failures, "images", len(samples))
    return result.exit_code


def add_robustness_subcommand(subparsers: Any) -> None:
    """Register ``robustness`` (``func``: its handler)."""
    robustness = subparsers.add_parser(
        "robustness", help="mean per-image Jaccard of a checkpoint under device-like shifts"
    )
    robustness.add_argument("--checkpoint", required=True, **model_options.CHECKPOINTS)
    add_data_dir_options(robustness, "the checkpoint")
    robustness.add_argument(
        "--split", default="test", choices=SPLIT_CHOICES, help="split to score (default test)"
    )
    robustness.add_argument(
        "-i", "--images", type=Path, help="folder of images (instead of a split)"
    )
    robustness.add_argument(
        "--masks", type=Path, help="folder of their masks, paired by image ID as evaluate pairs"
    )
    robustness.add_argument(
        "--shifts", help="comma-separated subset of the shifts (default: all of them)"
    )
    robustness.add_argument(
        "--seed", type=int, default=0, help="seed of the random parts of the shifts"
    )
    robustness.add_argument(
        "-o", "--output", required=True, type=Path, help="folder for the reports"
    )
    model_options.add_model_options(robustness)
    model_options.add_leak_option(robustness)
    robustness.set_defaults(func=run_robustness)
