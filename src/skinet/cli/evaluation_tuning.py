"""``skinet evaluate --tune-threshold``: tune the threshold (and, with ``--tune-tta``, flips) on
labelled images, and ``--save-calibrated``: keep the choice in a copy of the checkpoint."""

from __future__ import annotations

import argparse
import logging
from typing import Any

from skinet.config.errors import UsageError

log = logging.getLogger("skinet")


def check_save_calibrated(args: argparse.Namespace) -> None:
    """--save-calibrated: one tuned checkpoint file, written to a new name."""
    if not args.tune_threshold:
        raise UsageError("--save-calibrated stores the tuned threshold: add --tune-threshold")
    source = args.checkpoint[0]
    if len(args.checkpoint) != 1 or source.is_dir():
        raise UsageError("--save-calibrated calibrates one checkpoint file, not an ensemble")
    if args.save_calibrated.resolve() == source.resolve():
        raise UsageError(
            f"--save-calibrated {args.save_calibrated} is the checkpoint being calibrated: "
            "give a new file name (the original stays as trained)"
        )
    from skinet.checkpoints.calibrated_card import checkpoint_card_path

    outputs = (args.save_calibrated, checkpoint_card_path(args.save_calibrated))
    taken = [str(path) for path in outputs if path.exists()]
    if taken and not args.overwrite:
        raise UsageError(
            f"--save-calibrated: {' and '.join(taken)} already exist(s): give a new file "
            "name, or --overwrite to replace them"
        )


def tune_on_images(predictor: Any, samples: list[Any], where: str, args: argparse.Namespace) -> Any:
    """Tune the threshold (and flips, with --tune-tta) on ``samples`` and predict with it from
    now on; prints the choice. The tuned threshold and the flips decision (``None`` without
    --tune-tta)."""
    from skinet.checkpoints.threshold import for_flips
    from skinet.evaluation.tuning import choose_flips, tune_threshold
    from skinet.metrics.figures import signed
    from skinet.metrics.threshold_counts import GUARD_MIN_IMAGES

    reference = float(predictor.threshold)
    flips = None
    if args.tune_tta:
        # Each way keeps its own threshold unless the gain is clear: a calibration that kept
        # the threshold tuned each way has a different one for the way it did not choose.
        own = predictor.threshold_choice
        references = (for_flips(own, False).value, for_flips(own, True).value)
        flips = choose_flips(predictor, samples, args.threshold_selection, references)
        tuned = flips.tuned
        predictor.tta = flips.use
    else:
        tuned = tune_threshold(predictor, samples, args.threshold_selection, reference)
    predictor.threshold_choice = tuned.as_threshold(where)
    few = f" on fewer than {GUARD_MIN_IMAGES} images" if tuned.num_images < GUARD_MIN_IMAGES else ""
    kept = f" (the model's own: no clear gain{few})" if tuned.kept_reference else ""
    left_out = f"; {len(tuned.failures)} left out, see above" if tuned.failures else ""
    print(
        f"tuned threshold on {where} ({tuned.num_images} images{left_out}): "
        f"{tuned.threshold:.2f}{kept} "
        f"({tuned.selection}; pooled Dice {tuned.dice:.4f}, mean per-image Jaccard "
        f"{tuned.mean_jaccard:.4f})"
    )
    if flips is not None:
        low, high = flips.interval
        verdict = "flips on" if flips.use else f"flips off (no clear gain{few})"
        print(
            f"flips at prediction time on {where}: mean per-image Jaccard {signed(flips.gain)} "
            f"[{signed(low)}, {signed(high)}] (plain {flips.plain.mean_jaccard:.4f} at "
            f"{flips.plain.threshold:.2f}, flips {flips.flipped.mean_jaccard:.4f} at "
            f"{flips.flipped.threshold:.2f}): {verdict}"
        )
    if args.split == "test" and args.images is None:
        log.warning("the threshold was tuned on the test split: its scores are optimistic")
    elif args.images is not None or args.split == "none":
        log.warning(
            "the scores of %s are optimistic (the threshold was tuned on them): "
            "check it on other labelled images (--external)",
            where,
        )
    return tuned, flips


def tuning_set(args: argparse.Namespace) -> str | None:
    """The image folder the threshold is tuned on (``None``: a split of ``--data-dir``)."""
    if args.images is not None:
        return str(args.images.resolve())
    if args.split == "none":  # the first external set
        return str(args.external[0].images.resolve())
    return None


def save_calibrated(
    args: argparse.Namespace, predictor: Any, tuned: Any, where: str, flips: Any
) -> None:
    """--save-calibrated: a copy of the checkpoint that predicts with the tuned threshold (and
    flips), with its card."""
    from skinet.checkpoints.read import load_checkpoint
    from skinet.checkpoints.threshold import for_flips
    from skinet.evaluation.calibration import calibration_record, save_calibrated_checkpoint

    source = args.checkpoint[0]
    checkpoint = load_checkpoint(source)
    # The source's own threshold for the way it was tuned now (--no-tta: the one without flips).
    own = for_flips(checkpoint.threshold_choice, predictor.tta).value
    tuned_on = tuning_set(args) or where
    record = calibration_record(tuned, tuned_on, source.resolve(), own)
    if flips is not None:
        record.update(flips.record())
    elif predictor.tta:  # tuned on flipped maps (--tta, or a calibration's): predict so too
        record["tta"] = True
        if args.tta is None:  # the earlier calibration's choice, with the figures behind it
            earlier = checkpoint.payload.calibration or {}
            record.update({k: earlier[k] for k in ("tta_gain", "tta_interval") if k in earlier})
    path = save_calibrated_checkpoint(source, args.save_calibrated, record)
    log.info(
        "wrote %s: threshold %.2f (was %.2f)%s",
        path,
        tuned.threshold,
        own,
        ", flips on; predict and evaluate use both, an export the threshold only (one pass: "
        "its sidecar says tta)"
        if record.get("tta")
        else "; predict, evaluate and export use it",
    )
