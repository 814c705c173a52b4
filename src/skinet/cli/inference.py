"""``skinet predict`` and ``export``, and the model options they share with ``evaluate``:
argument parsing only."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path
from typing import Any

from skinet.cli.arguments import add_option, check_output_folder, positive_int, probability
from skinet.config.errors import UsageError
from skinet.inference.options import DEFAULT_OPSET, DEFAULT_TOLERANCE, EXPORT_FORMATS

log = logging.getLogger("skinet")

CHECKPOINTS: dict[str, Any] = {
    "nargs": "+",
    "type": Path,
    "metavar": "CKPT",
    "help": "a .ckpt from training; several, or a `skinet cv` folder, form an ensemble "
    "(mean of the probabilities)",
}


def _non_negative_int(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


def add_prediction_flags(parser: argparse.ArgumentParser) -> None:
    """The flags that decide how a checkpoint's probabilities become a mask (also taken per
    model by ``skinet compare --options``)."""
    parser.add_argument(
        "--threshold", type=probability, help="override the checkpoint's threshold (0..1)"
    )
    parser.add_argument(
        "--tta",
        action=argparse.BooleanOptionalAction,
        help="average over flips (4x slower); --no-tta: without (default: as a calibrated "
        "checkpoint's --tune-tta chose, else without)",
    )
    parser.add_argument(
        "--keep-largest", action="store_true", help="keep only the largest connected component"
    )
    parser.add_argument("--fill-holes", action="store_true", help="fill holes inside the mask")


def add_model_options(parser: argparse.ArgumentParser) -> None:
    add_prediction_flags(parser)
    parser.add_argument(
        "--batch-size", type=positive_int, default=8, help="images per forward pass"
    )
    parser.add_argument(
        "--device",
        default="auto",
        choices=("auto", "cpu", "cuda", "mps"),
        help="where the model runs (auto: CUDA, else Apple MPS, else CPU)",
    )


def add_leak_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--allow-leak",
        action="store_true",
        help="score --split val/train of an ensemble whose members trained on other splits (cv "
        "folds) anyway: those images trained some members, so the scores are optimistic",
    )


def build_predictor(args: argparse.Namespace) -> Any:
    from skinet.inference.ensemble import EnsemblePredictor, build_predictor

    predictor = build_predictor(
        args.checkpoint,
        device=args.device,
        threshold=args.threshold,
        tta=args.tta,
        keep_largest=args.keep_largest,
        fill_holes=args.fill_holes,
        batch_size=args.batch_size,
    )
    flips = ""
    # Flips come from a calibration for one checkpoint, from its cv for a folder.
    calibrated = not isinstance(predictor, EnsemblePredictor)
    if predictor.tta:
        chose = "calibrated" if calibrated else "its cross-validation chose"
        flips = "; flips at prediction time" + (" (--tta)" if args.tta else f" (as {chose})")
    elif args.tta is False and predictor.threshold_choice.tta:
        tuned = "calibrated" if calibrated else "tuned"
        flips = f"; without the flips it was {tuned} with (--no-tta)"
    elif args.tta is False and (predictor.calibration or {}).get("without_tta"):
        flips = " (--no-tta)"
    log.info("%s%s", predictor.threshold_choice.describe(), flips)
    return predictor


def checkpoint_info(args: argparse.Namespace) -> str | list[str]:
    paths = [str(p) for p in args.checkpoint]
    return paths[0] if len(paths) == 1 else paths


def report_failures(failures: dict[Any, str], what: str, total: int) -> None:
    if not failures:
        return
    log.error("%d of %d %s failed:", len(failures), total, what)
    for name, message in failures.items():
        log.error("  %s: %s", name, message)


def run_predict(args: argparse.Namespace) -> int:
    """Predict masks for a file or folder; 1 if any image failed."""
    from skinet.inference.ensemble import resolve_checkpoints
    from skinet.inference.predict import predict_paths
    from skinet.inference.predict_record import (
        PREDICTIONS_FILE,
        predictions_record,
        write_predictions_record,
    )

    paths = _checked_inputs(args)
    predictor = build_predictor(args)
    log.info("threshold %.3f, %d image(s) -> %s", predictor.threshold, len(paths), args.output)
    arguments = _plain_arguments(args)
    _start_record(args, paths, arguments)
    try:
        report = predict_paths(
            predictor,
            paths,
            args.output,
            save_proba=args.save_proba,
            save_overlay=args.save_overlay,
            io_workers=args.io_workers,
        )
    except KeyboardInterrupt:
        raise KeyboardInterrupt(
            f"partial masks are left in {args.output}, its {PREDICTIONS_FILE} marked incomplete "
            '("complete": false); rerun the command to replace them'
        ) from None
    failures = {p.name: m for p, m in report.failures.items()}
    record = predictions_record(
        predictor,
        resolve_checkpoints(args.checkpoint),
        args.input,
        len(paths),
        len(report.written),
        failures,
        {"save_proba": args.save_proba, "save_overlay": args.save_overlay},
        arguments,
        _written_files(args, report.written),
    )
    write_predictions_record(args.output, record)
    log.info("wrote %d mask(s) and %s to %s", len(report.written), PREDICTIONS_FILE, args.output)
    report_failures(failures, "images", len(paths))
    return report.exit_code


def _checked_inputs(args: argparse.Namespace) -> list[Path]:
    """The images to predict, once --output and the inputs are known to be usable (exit 2)."""
    from skinet.inference.predict import check_unique_stems, list_images
    from skinet.inference.predict_record import check_output_dir

    check_output_folder(args.output)
    paths = list_images(args.input)
    if not paths:
        raise FileNotFoundError(f"no images (.jpg, .png, .bmp, .tif) in {args.input}")
    try:
        check_unique_stems(paths)
    except ValueError as error:
        raise UsageError(str(error)) from None
    check_output_dir(args.output, paths, overwrite=args.overwrite)
    return paths


def _plain_arguments(args: argparse.Namespace) -> dict[str, Any]:
    """The command's arguments as JSON data (paths as text)."""

    def plain(value: Any) -> Any:
        if isinstance(value, list | tuple):
            return [plain(item) for item in value]
        return str(value) if isinstance(value, Path) else value

    return {key: plain(value) for key, value in vars(args).items() if not callable(value)}


def _start_record(args: argparse.Namespace, paths: list[Path], arguments: dict[str, Any]) -> None:
    """Mark the folder as this run's, incomplete, then remove an earlier run's files.

    The record lists the earlier files too until they are gone, so a run stopped here still
    leaves a folder whose rerun clears them.
    """
    from skinet.inference.predict import output_names
    from skinet.inference.predict_record import (
        PREDICTIONS_FILE,
        earlier_prediction,
        remove_outputs,
        started_record,
        write_predictions_record,
    )

    planned = [n for p in paths for n in output_names(p.stem, args.save_proba, args.save_overlay)]
    earlier = earlier_prediction(args.output, planned)
    unlisted = earlier.unlisted
    if unlisted:
        log.warning(
            "%s holds %d prediction file(s) this run does not replace (%s), under a %s that "
            "does not list the files it wrote (an older SkiNet): they are left as they are; "
            "remove them, or give a new --output, for a folder of this run's masks only",
            args.output,
            len(unlisted),
            ", ".join(unlisted[:3]) + (", ..." if len(unlisted) > 3 else ""),
            PREDICTIONS_FILE,
        )
    args.output.mkdir(parents=True, exist_ok=True)
    listed = [*dict.fromkeys([*planned, *earlier.listed])]
    write_predictions_record(args.output, started_record(arguments, listed))
    removed = remove_outputs(args.output, earlier.listed)
    if removed:
        log.info("removed %d file(s) an earlier prediction wrote to %s", removed, args.output)


def _written_files(args: argparse.Namespace, masks: list[Path]) -> list[str]:
    """The names of the files written for the images whose mask was written."""
    from skinet.inference.predict import output_names

    stems = [mask.name.removesuffix("_mask.png") for mask in masks]
    return [n for s in stems for n in output_names(s, args.save_proba, args.save_overlay)]


def run_export(args: argparse.Namespace) -> int:
    """Export with sigmoid, write the sidecar, check parity; 1 when parity fails."""
    from skinet.inference.export import ExportError, card_path, export_checkpoint, sidecar_path

    try:
        parity = export_checkpoint(
            args.checkpoint, args.output, args.format, args.opset, args.tolerance
        )
    except ExportError as error:
        if not str(error).startswith("parity check failed"):
            raise
        log.error("%s", error)
        return 1
    log.info(
        "exported %s (+ %s, %s)",
        args.output,
        sidecar_path(args.output).name,
        card_path(args.output).name,
    )
    if parity is not None:
        log.info(
            "parity: max |exported - PyTorch| = %.3g (tolerance %g)",
            parity.max_abs_diff,
            parity.tolerance,
        )
    return 0


def add_predict_subcommand(subparsers: Any) -> None:
    """Register ``predict`` (``func``: its handler)."""

    predict = subparsers.add_parser("predict", help="segment images with a trained checkpoint")
    predict.add_argument("--checkpoint", required=True, **CHECKPOINTS)
    add_option(
        predict,
        "-i",
        "--images",
        hidden=("--input",),
        dest="input",
        metavar="IMAGES",
        required=True,
        type=Path,
        help="an image file or folder",
    )
    predict.add_argument(
        "-o", "--output", required=True, type=Path, help="folder for <stem>_mask.png"
    )
    predict.add_argument(
        "--overwrite",
        action="store_true",
        help="write into an --output folder that holds other files (e.g. the input images)",
    )
    add_model_options(predict)
    predict.add_argument(
        "--save-proba",
        nargs="?",
        const="png",
        choices=("png", "npy"),
        help="also write probability maps: <stem>_proba.png (0..255, default) or .npy (float32)",
    )
    predict.add_argument(
        "--save-overlay", action="store_true", help="also write <stem>_overlay.png (contour)"
    )
    predict.add_argument(
        "--io-workers",
        type=_non_negative_int,
        default=2,
        help="threads decoding and writing while the model runs (0: all in one thread)",
    )
    predict.set_defaults(func=run_predict)


def add_export_subcommand(subparsers: Any) -> None:
    """Register ``export`` (``func``: its handler)."""
    export = subparsers.add_parser(
        "export", help="export the model (with sigmoid) to ONNX or TorchScript"
    )
    export.add_argument("--checkpoint", required=True, **CHECKPOINTS)
    export.add_argument("--format", required=True, choices=EXPORT_FORMATS)
    export.add_argument("-o", "--output", required=True, type=Path, help="the exported file")
    export.add_argument("--opset", type=int, default=DEFAULT_OPSET, help="ONNX opset version")
    export.add_argument(
        "--tolerance",
        type=float,
        default=DEFAULT_TOLERANCE,
        help="largest accepted |exported - PyTorch| on random inputs",
    )
    export.set_defaults(func=run_export)
