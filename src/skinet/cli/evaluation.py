"""``skinet evaluate``: score a checkpoint, an ensemble or predicted masks on labelled sets."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path
from typing import Any

from skinet.cli.arguments import check_output_folder
from skinet.cli.evaluation_tuning import (
    check_save_calibrated,
    save_calibrated,
    tune_on_images,
    tuning_set,
)
from skinet.cli.inference import (
    build_predictor,
    checkpoint_info,
    report_failures,
)
from skinet.config.errors import UsageError

log = logging.getLogger("skinet")


def run_evaluate(args: argparse.Namespace) -> int:
    """Score a checkpoint on a split, a labelled folder and external sets, or predicted masks."""
    from skinet.evaluation.mask_folders import evaluate_mask_folders

    check_output_folder(args.output)
    if args.predictions is not None:
        _check_prediction_options(args)
        result = evaluate_mask_folders(
            args.predictions,
            args.masks,
            args.pixel_spacing_mm,
            args.gallery,
            args.gallery_order,
        )
        _clear_reports(args.output)
        return _write_scored(result, args.output)
    if args.checkpoint is None:
        raise UsageError("give --checkpoint (with --data-dir), or --predictions and --masks")
    _check_evaluate_options(args)
    predictor = build_predictor(args)
    sets = _evaluation_sets(predictor, args)
    main_name, main_samples, *_ = sets[0]
    tuned_on = None
    if args.tune_threshold:
        tuned, flips = tune_on_images(predictor, main_samples, main_name, args)
        tuned_on = tuning_set(args) or args.split
        if args.save_calibrated is not None:
            save_calibrated(args, predictor, tuned, main_name, flips)
    codes, summaries = [], {}
    split_scored = args.images is None and args.split != "none"  # the first set is a split
    trained = _trained_ids(predictor, args)
    _clear_reports(args.output)  # an earlier run's gallery or sets would look like this run's
    try:
        for index, (name, samples, output, without_mask) in enumerate(sets):
            log.info("evaluating %d image(s) of %s", len(samples), name)
            split = args.split if split_scored and index == 0 else None
            seen = [] if split is not None else _seen_in_training(trained, name, samples)
            result = _evaluate_set(predictor, samples, args, split)
            result.info.update(evaluated=name, threshold_tuned_on=tuned_on)
            if seen:
                result.info["seen_in_training"] = seen
            result.without_mask.update(without_mask)
            codes.append(_write_scored(result, output, quiet=len(sets) > 1))
            summaries[name] = result.summary
    except KeyboardInterrupt:
        # Some sets' reports would stand without the others and the comparison.
        _clear_reports(args.output)
        raise KeyboardInterrupt(f"no report is left in {args.output}") from None
    if len(sets) > 1:
        _print_sets(summaries, tuned_set=main_name if args.tune_threshold else None)
    return max(codes)


def _clear_reports(output: Path) -> None:
    """Remove an earlier evaluation's reports from ``output`` (only the files it wrote)."""
    from skinet.evaluation.report_folder import clear_reports as clear

    clear(output)


def _check_prediction_options(args: argparse.Namespace) -> None:
    """``--predictions``: predicted masks scored as they are, with no model option (exit 2)."""
    if args.masks is None or args.checkpoint is not None:
        raise UsageError("use --predictions with --masks, or --checkpoint (not both)")
    if args.external or args.images is not None or args.save_calibrated is not None:
        raise UsageError("--external, --images and --save-calibrated need --checkpoint")
    if args.tune_threshold or args.tune_tta or args.tta is not None:
        raise UsageError(
            "--tune-threshold, --tune-tta and --tta/--no-tta predict with a model: give "
            "--checkpoint, not --predictions (the masks are scored as they are)"
        )


def _check_evaluate_options(args: argparse.Namespace) -> None:
    """Refuse a combination of ``evaluate`` options that cannot run (usage errors, exit 2)."""
    _check_sources(args)
    if args.tune_threshold and args.threshold is not None:
        raise UsageError("--tune-threshold picks the threshold: do not give --threshold too")
    if args.tune_tta and not args.tune_threshold:
        raise UsageError(
            "--tune-tta decides flips together with the threshold: add --tune-threshold"
        )
    if args.tune_tta and args.tta is not None:
        raise UsageError("--tune-tta decides flips: do not give --tta or --no-tta too")
    if args.save_calibrated is not None:
        check_save_calibrated(args)
    _check_external_names(args)


def _check_sources(args: argparse.Namespace) -> None:
    """One source of images: a folder (--images/--masks) or a split, plus --external sets."""
    if (args.images is None) != (args.masks is None):
        raise UsageError("--images and --masks go together")
    if args.images is not None and args.split not in (None, "none"):
        raise UsageError(
            f"--split {args.split} scores a split of --data-dir; with --images the folder is "
            "scored instead: drop --split (or --images)"
        )
    if args.split is None:
        args.split = "none" if args.images is not None else "test"
    if args.images is not None and (args.data is not None or args.dataset is not None):
        raise UsageError("use --images with --masks, or --data-dir/--dataset/--split (not both)")
    if args.split == "none" and args.images is None and not args.external:
        raise UsageError("--split none scores nothing: add --images/--masks or --external")


def _check_external_names(args: argparse.Namespace) -> None:
    """--external names: distinct, and none the name of a report evaluate writes, in any case
    (``Clinic`` and ``clinic`` are one folder on macOS and Windows)."""
    names = [external.name for external in args.external]
    if len({name.casefold() for name in names}) != len(names):
        raise UsageError(f"--external names must differ (also in upper/lower case), got {names}")
    from skinet.evaluation.report_folder import REPORT_FILES

    reports = {name.casefold() for name in REPORT_FILES}
    for external in args.external:
        if external.name.casefold() in reports:
            raise UsageError(
                f"--external {external.name}=...: the set's reports go into the folder "
                f"{args.output / external.name}, which is the name of a report evaluate writes "
                f"into {args.output}: give the set another name"
            )


_Set = tuple[str, Any, Path, dict[str, str]]
"""One set to score: its name, image/mask pairs, report folder, and the images of a labelled
folder that have no mask (ID: reason), reported as not scored."""


def _evaluation_sets(predictor: Any, args: argparse.Namespace) -> list[_Set]:
    """The main set in --output, each external in a subfolder.

    The main set is --images/--masks, else --split (none: the first external set).
    """
    from skinet.evaluation.evaluate import select_samples

    sets: list[_Set] = []
    if args.images is not None:
        sets.append(_labelled_set(str(args.images), args.images, args.masks, args.output))
    elif args.split != "none":
        refuse_leak(predictor, args)
        samples = select_samples(
            predictor.config, args.data, args.dataset, args.split, recorded_split(args)
        )
        sets.append((f"split {args.split!r}", samples, args.output, {}))
    for external in args.external:
        output = args.output / external.name
        sets.append(_labelled_set(external.name, external.images, external.masks, output))
    return sets


def _labelled_set(name: str, images: Path, masks: Path, output: Path) -> _Set:
    from skinet.evaluation.mask_folders import pair_labelled_folder

    samples, unmatched = pair_labelled_folder(images, masks)
    if unmatched:
        log.error(
            "%s: %d of %d image(s) have no mask in %s (paired by file stem), e.g. %s: they are "
            "not scored, and counted in summary.json (num_without_mask) and the exit status",
            name,
            len(unmatched),
            len(unmatched) + len(samples),
            masks,
            [path.name for path in unmatched[:3]],
        )
    missing = {path.stem: f"{path.name}: no mask in {masks}" for path in unmatched}
    return name, samples, output, missing


def _trained_ids(predictor: Any, args: argparse.Namespace) -> set[str]:
    """The IDs every scored model trained or validated on, by its run's ``splits.csv`` (each
    member's, for an ensemble); read once per evaluation."""
    from skinet.inference.ensemble import recorded_assignment, split_of

    members = list(
        zip(
            getattr(predictor, "member_paths", []),
            getattr(predictor, "member_splits", []),
            strict=True,
        )
    )
    if not members:  # one checkpoint file
        members = [(Path(args.checkpoint[0]), split_of(predictor.config))]
    trained: set[str] = set()
    for path, split in members:
        assignment = recorded_assignment(path, split) or {}
        trained |= {i for i, role in assignment.items() if role in ("train", "val")}
    return trained


def _seen_in_training(trained: set[str], name: str, samples: Any) -> list[str]:
    """The IDs of a labelled folder's images among ``trained``, with a warning: their scores
    are not those of unseen images."""
    ids = {sample.id for sample in samples}
    seen = ids & trained
    if seen:
        log.warning(
            "%s: %d of its %d image(s) (e.g. %s) are in the train or val split the model was "
            "trained with (its run's splits.csv): their scores are not those of unseen images",
            name,
            len(seen),
            len(ids),
            ", ".join(sorted(seen)[:3]),
        )
    return sorted(seen)


def recorded_split(args: argparse.Namespace) -> Path | None:
    """The ``splits.csv`` of a single checkpoint's run folder, if it is in one."""
    from skinet.datasets.splits import SPLIT_FILE_NAME

    if len(args.checkpoint) != 1 or args.checkpoint[0].is_dir():
        return None
    recorded = args.checkpoint[0].resolve().parent.parent / SPLIT_FILE_NAME
    return recorded if recorded.is_file() else None


def refuse_leak(predictor: Any, args: argparse.Namespace) -> None:
    from skinet.inference.ensemble import check_split_not_leaked

    try:
        check_split_not_leaked(predictor, args.split, allow_leak=False)
    except ValueError as error:
        if not args.allow_leak:
            raise UsageError(str(error)) from None
        log.warning("--allow-leak: the scores of split %r are optimistic (%s)", args.split, error)


def _evaluate_set(predictor: Any, samples: Any, args: argparse.Namespace, split: str | None) -> Any:
    """Score one set; ``split`` is the split it is (``None`` for a labelled folder)."""
    from skinet.checkpoints.threshold import rounded
    from skinet.evaluation.evaluate import evaluate_predictor
    from skinet.inference.ensemble import resolve_checkpoints
    from skinet.runtime.files import file_sha256

    result = evaluate_predictor(
        predictor,
        samples,
        pixel_spacing_mm=args.pixel_spacing_mm,
        gallery_size=args.gallery,
        gallery_order=args.gallery_order,
    )
    result.info.update(
        checkpoint=checkpoint_info(args),
        # Which files scored, by content, and where their threshold came from (as in
        # predictions.json): a checkpoint overwritten later no longer matches its report.
        checkpoints=[
            {"path": str(path.resolve()), "sha256": file_sha256(path)}
            for path in resolve_checkpoints(args.checkpoint)
        ],
        threshold_choice=rounded(predictor.threshold_choice.to_dict()),
        split=split,
        threshold=predictor.threshold,
        calibration=getattr(predictor, "calibration", None),
        tta=predictor.tta,
        keep_largest=args.keep_largest,
        fill_holes=args.fill_holes,
    )
    return result


def _write_scored(result: Any, output: Path, quiet: bool = False) -> int:
    """Write one evaluation's reports and print its summary; its exit status."""
    from skinet.evaluation.evaluate import write_evaluation

    if not result.metrics:
        report_failures(result.failures, "images", len(result.failures))
        log.error("no image could be scored; nothing written to %s", output)
        return 1
    paths = write_evaluation(result, output)
    if not quiet:
        _print_summary(result.summary)
    log.info("wrote %s", ", ".join(str(p) for p in paths.values()))
    report_failures(result.failures, "images", len(result.metrics) + len(result.failures))
    return int(result.exit_code)


def _print_sets(summaries: dict[str, dict[str, Any]], tuned_set: str | None = None) -> None:
    """One row per evaluated set, and the mean over the sets (what the recipe study ranks by);
    the set the threshold was tuned on is marked, and its optimistic score left out of the
    mean."""
    from rich.table import Table

    from skinet.runtime.console import console

    table = Table(title="mean per-image scores at the original resolution")
    columns = ("images", "Jaccard", "Dice", "sens.", "spec.", "area ratio")
    table.add_column("set")
    for column in columns:
        table.add_column(column, justify="right")
    keys = ("mean_jaccard", "mean_dice", "mean_sensitivity", "mean_specificity")
    for name, summary in summaries.items():
        figures = [f"{summary[key]:.4f}" for key in keys]
        ratio = summary.get("median_area_ratio")
        area = "n/a" if ratio is None or ratio != ratio else f"{ratio:.2f}"
        label = f"{name} (tuned)" if name == tuned_set else name
        table.add_row(label, str(summary["num_images"]), *figures, area)
    others = [s["mean_jaccard"] for name, s in summaries.items() if name != tuned_set]
    if others:
        label = "mean over sets" if len(others) == len(summaries) else "mean of the others"
        mean = sum(others) / len(others)
        table.add_row(label, "", f"{mean:.4f}", "", "", "", "", style="bold")
    table.caption = "area ratio: median predicted / true lesion area (> 1: contour drawn too large)"
    if tuned_set is not None:
        table.caption += "; (tuned): the threshold was tuned on it, its scores are optimistic"
    console().print(table)


def _print_summary(summary: dict[str, Any]) -> None:
    from rich.table import Table

    from skinet.runtime.console import console

    table = Table(title=f"{summary.get('num_images', 0)} images", show_header=False)
    for key, value in summary.items():
        if key.startswith(("mean_", "median_", "pooled_")):
            table.add_row(key, "undefined" if value is None else f"{value:.4f}")
    if summary.get("num_surface_undefined"):
        table.add_row(
            "images without HD95/ASSD (one mask empty)", str(summary["num_surface_undefined"])
        )
    console().print(table)
