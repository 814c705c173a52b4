"""``skinet compare``: is model B better than model A on the same labelled images?"""

from __future__ import annotations

import argparse
import glob
import logging
import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from skinet.checkpoints.cv_folder import CV_RESULTS_DIR
from skinet.cli.arguments import (
    add_data_dir_options,
    check_output_folder,
    external_set,
    positive_int,
    probability,
)
from skinet.cli.evaluation import refuse_leak
from skinet.cli.inference import (
    add_leak_option,
    add_model_options,
    add_prediction_flags,
    build_predictor,
)
from skinet.config.errors import UsageError
from skinet.evaluation.options import SPLIT_CHOICES

log = logging.getLogger("skinet")


MODEL_NAME = re.compile(r"[A-Za-z0-9_.+-]+")


@dataclass(frozen=True)
class ModelSpec:
    """``[NAME=]PATH[,PATH...]``: one model, trained once or several times (seeds)."""

    name: str
    paths: tuple[Path, ...]


def model_spec(text: str) -> ModelSpec:
    """An ``argparse`` type: ``NAME=PATH[,PATH...]`` or a single ``PATH`` (named after it)."""
    # Checkpoint names hold '=' (best-epoch=003.ckpt): a NAME is a plain word before the first
    # '=', and text that names existing paths as it stands is paths.
    name, sep, rest = text.partition("=")
    whole = [part for part in text.split(",") if part]
    as_paths = all(Path(p).exists() or glob.glob(p, recursive=True) for p in whole)
    if not sep or not MODEL_NAME.fullmatch(name) or as_paths:
        name, rest = "", text
    paths = tuple(path for part in rest.split(",") if part for path in _expand(part))
    if not paths:
        raise argparse.ArgumentTypeError(f"expected [NAME=]PATH[,PATH...], got {text!r}")
    for path in paths:
        if not path.exists():
            what = "no file matches" if _is_pattern(str(path)) else "not found"
            raise argparse.ArgumentTypeError(
                f"{path}: {what} (give a checkpoint .ckpt, a skinet cv folder or a folder of "
                "predicted masks)"
            )
    if not name:
        only = paths[0].resolve()
        name = only.parent.parent.name if only.parent.name == "checkpoints" else only.stem
    return ModelSpec(name, paths)


@dataclass(frozen=True)
class ModelOptions:
    """``NAME=FLAGS``: prediction flags for one model's checkpoints (``--options``)."""

    name: str
    flags: dict[str, Any]


def _flags_parser() -> argparse.ArgumentParser:
    """The flags of ``predict`` that ``--options`` sets per model; unset ones stay ``None``."""
    parser = argparse.ArgumentParser(
        prog="--options NAME=", add_help=False, exit_on_error=False, allow_abbrev=False
    )
    add_prediction_flags(parser)
    parser.set_defaults(threshold=None, tta=None, keep_largest=None, fill_holes=None)
    return parser


OPTION_FLAGS = "--tta, --no-tta, --keep-largest, --fill-holes, --threshold T"
"""What ``--options`` takes, in words."""


def model_options(text: str) -> ModelOptions:
    """An ``argparse`` type: ``NAME=FLAGS``, e.g. ``flips=--tta --fill-holes``."""
    name, sep, flags = text.partition("=")
    if not sep or not MODEL_NAME.fullmatch(name):
        raise argparse.ArgumentTypeError(f"expected NAME=FLAGS (e.g. 'flips=--tta'), got {text!r}")
    try:
        parsed, unknown = _flags_parser().parse_known_args(shlex.split(flags))
    except (argparse.ArgumentError, ValueError) as error:
        raise argparse.ArgumentTypeError(f"{name}: {error}") from None
    given = {key: value for key, value in vars(parsed).items() if value is not None}
    if unknown or not given:
        raise argparse.ArgumentTypeError(
            f"{name}: {'unknown ' + ' '.join(unknown) if unknown else 'no flags'}; "
            f"per model: {OPTION_FLAGS}"
        )
    return ModelOptions(name, given)


def _expand(part: str) -> list[Path]:
    """A path, or the files a pattern matches, sorted: runs of one model. The shell expands no
    pattern after ``NAME=``, so ``flips=runs/*/checkpoints/best-*.ckpt`` is expanded here."""
    if Path(part).exists() or not _is_pattern(part):
        return [Path(part)]
    return [Path(match) for match in sorted(glob.glob(part, recursive=True))] or [Path(part)]


def _is_pattern(text: str) -> bool:
    return any(char in text for char in "*?[")


def run_compare(args: argparse.Namespace) -> int:
    """Score every run of every model on every set; print and write the comparison."""
    from skinet.evaluation.compare import (
        compare_scores,
        comparison_table,
        options_note,
        write_comparison,
    )

    _check_arguments(args)
    check_output_folder(args.output)
    predictors = _load_models(args)
    sets = _labelled_sets(args, predictors)
    scores: dict[str, dict[str, list[dict[str, float]]]] = {name: {} for name in sets}
    for name, path, predictor in predictors:
        for set_name, samples in sets.items():
            log.info("%s: scoring %s on %s (%d images)", name, path, set_name, len(samples))
            run_scores = _score(path, predictor, set_name, samples)
            scores[set_name].setdefault(name, []).append(run_scores)
    try:
        comparison = compare_scores(
            scores, args.draws, args.confidence, args.seed, paired_runs=args.paired_runs
        )
    except ValueError as error:
        raise UsageError(str(error)) from None
    flags = _flags_by_model(args)
    models = {
        spec.name: {
            "paths": [str(path) for path in spec.paths],
            **({"options": _words(flags[spec.name])} if spec.name in flags else {}),
        }
        for spec in args.models
    }
    paths = write_comparison(comparison, scores, args.output, models)
    print(comparison_table(comparison) + options_note(models))
    print(f"written: {paths['table']}, {paths['json']}, {paths['per_image']}")
    return 0


def _check_arguments(args: argparse.Namespace) -> None:
    """Refuse what cannot be compared before anything is read."""
    names = [spec.name for spec in args.models]
    if len(args.models) < 2:
        raise UsageError("compare needs two models or more: give a reference, then the others")
    if len(set(names)) != len(names):
        raise UsageError(f"model names must differ, got {names}: name them with NAME=PATH")
    counts = {spec.name: len(spec.paths) for spec in args.models}
    if args.paired_runs and len(set(counts.values())) > 1:
        raise UsageError(f"--paired-runs needs as many runs of every model, got {counts}")
    if args.split == "none" and not args.external:
        raise UsageError("nothing to score: give --split (of --data-dir) and/or --external")
    optioned = [options.name for options in args.options]
    if unknown := sorted(set(optioned) - set(names)):
        raise UsageError(f"--options {unknown[0]}=...: no model is named {unknown[0]!r} ({names})")
    if twice := sorted({name for name in optioned if optioned.count(name) > 1}):
        raise UsageError(f"--options {twice[0]}= is given twice: put its flags in one")
    set_names = ([args.split] if args.split != "none" else []) + [e.name for e in args.external]
    twice = sorted({name for name in set_names if set_names.count(name) > 1})
    if twice:
        raise UsageError(f"two sets are named {twice[0]!r}: rename the --external one")


def _load_models(args: argparse.Namespace) -> list[tuple[str, Path, Any]]:
    """``(model, path, predictor)`` per run (``None`` for a folder of predicted masks).

    Every checkpoint (or cv folder's ensemble) is loaded, and checked against the split it
    would score, before any is scored: a refused model loses no work.
    """
    flags = _flags_by_model(args)
    for spec in args.models:
        if spec.name in flags and any(_is_prediction_folder(path) for path in spec.paths):
            raise UsageError(
                f"--options {spec.name}=...: {spec.name}'s runs include a folder of predicted "
                "masks, which no flag changes: give its checkpoints"
            )
    predictors = [
        (
            spec.name,
            path,
            None if _is_prediction_folder(path) else _predictor(path, args, flags.get(spec.name)),
        )
        for spec in args.models
        for path in spec.paths  # a path given twice is two runs
    ]
    for options in args.options:
        log.info("%s: predicted with %s (--options)", options.name, _words(options.flags))
    if args.split != "none":
        for *_, predictor in predictors:
            if predictor is not None:
                refuse_leak(predictor, args)
    if args.paired_runs:
        _refuse_mispaired_runs(predictors, len(args.models[0].paths))
    return predictors


def _refuse_mispaired_runs(predictors: list[tuple[str, Path, Any]], runs: int) -> None:
    """``--paired-runs`` pairs run i of every model: refuse a run i whose models came from
    different source models, as far as the checkpoints say (a fine-tuned run names the
    checkpoint it started from, a calibrated copy the one it was tuned from; a model of its own
    is its own source). Sources are told apart by their content, so a copy is the same source;
    folders of masks, and sources no longer on disk, are not checked."""
    from skinet.runtime.files import file_sha256

    for index in range(runs):
        runs_i = predictors[index::runs]  # models in order, each with its runs in order
        lineage = [(name, *_source_model(path, predictor)) for name, path, predictor in runs_i]
        if not any(derived for *_, derived in lineage):
            continue  # models trained on their own: paired by seed, nothing to check
        known = [(name, source) for name, source, _ in lineage if source is not None]
        files = {source.resolve() for _, source in known}
        if len(files) > 1 and len({file_sha256(path) for path in files}) > 1:  # copies agree
            described = "; ".join(f"{name}: {source}" for name, source in known)
            raise UsageError(
                f"--paired-runs pairs run {index + 1} of every model, but those runs come from "
                f"different source models ({described}). Give every model's runs in the same "
                "order of source models, or leave out --paired-runs"
            )


def _source_model(path: Path, predictor: Any) -> tuple[Path | None, bool]:
    """``(source checkpoint, derived)``: the checkpoint the run was fine-tuned or calibrated
    from (``derived``), or the run's own file; ``None`` when unknown or no longer on disk."""
    from skinet.checkpoints.read import load_checkpoint

    if predictor is None:
        return None, False  # a folder of masks
    if path.is_file():  # read again: --threshold hides a calibrated copy's record
        checkpoint = load_checkpoint(path)
        config, calibration = checkpoint.config, checkpoint.payload.calibration or {}
    else:  # a cv folder: its folds started from one checkpoint, or from scratch
        config, calibration = predictor.config, {}
    origin = config.train.init_checkpoint or calibration.get("source_checkpoint")
    if origin is None:
        return (path if path.is_file() else None), False
    origin = Path(origin)
    return (origin if origin.is_absolute() and origin.is_file() else None), True


def _flags_by_model(args: argparse.Namespace) -> dict[str, dict[str, Any]]:
    """``--options``: each named model's prediction flags."""
    return {options.name: options.flags for options in args.options}


def _words(flags: dict[str, Any]) -> str:
    """``{"tta": True, "threshold": 0.4}`` -> ``--tta --threshold 0.4``."""
    words = []
    for key, value in flags.items():
        flag = "--" + key.replace("_", "-")
        if value is False:
            words.append(flag.replace("--", "--no-", 1))
        else:
            words.append(flag if value is True else f"{flag} {value}")
    return " ".join(words)


def _labelled_sets(
    args: argparse.Namespace, predictors: list[tuple[str, Path, Any]]
) -> dict[str, Any]:
    """``{name: samples}``: the data folder's split first, then every ``--external`` folder."""
    from skinet.evaluation.mask_folders import pair_image_folder

    sets: dict[str, Any] = {}
    if args.split != "none":
        from skinet.evaluation.evaluate import select_samples

        config = _split_config(args, predictors)
        sets[args.split] = select_samples(config, args.data, args.dataset, args.split)
    for external in args.external:
        sets[external.name] = pair_image_folder(external.images, external.masks)
    return sets


def _split_config(args: argparse.Namespace, predictors: list[tuple[str, Path, Any]]) -> Any:
    """The config whose layout and split seed select ``--split``: the first checkpoint's."""
    from skinet.config.experiment import parse_config

    for *_, predictor in predictors:
        if predictor is not None:
            return predictor.config
    if args.data is None or args.dataset is None:
        raise UsageError(
            "--split of prediction folders needs --data-dir and --dataset (no checkpoint "
            "says where the images are)"
        )
    return parse_config({})


def _is_prediction_folder(path: Path) -> bool:
    """A folder of predicted masks; not a checkpoint file nor a ``skinet cv`` folder (one with
    ``results/fold_*.json``)."""
    return path.is_dir() and not any((path / CV_RESULTS_DIR).glob("fold_*.json"))


def _predictor(path: Path, args: argparse.Namespace, flags: dict[str, Any] | None) -> Any:
    """A checkpoint's predictor, built as ``predict`` and ``evaluate`` build it; ``flags``
    (the model's ``--options``) override the command's."""
    return build_predictor(
        argparse.Namespace(**{**vars(args), **(flags or {}), "checkpoint": [path]})
    )


def _score(path: Path, predictor: Any, set_name: str, samples: Any) -> dict[str, float]:
    """Per-image Jaccard of a checkpoint's ``predictor``, or of the folder of predicted masks
    ``path`` (``FOLDER/<set>`` when it exists, else ``FOLDER``)."""
    from skinet.evaluation.compare import score_predictions, score_samples

    if predictor is not None:
        return score_samples(predictor, samples)
    folder = path / set_name if (path / set_name).is_dir() else path
    return score_predictions(folder, samples)


def add_compare_subcommand(subparsers: Any) -> None:
    """Register ``compare`` (``func``: its handler)."""
    compare = subparsers.add_parser(
        "compare",
        help="is B better than A? per-image Jaccard differences with paired bootstrap intervals",
        description="Score two or more models on the same labelled images and print, per set, "
        "each model's mean per-image Jaccard and its difference to the first model with a "
        "paired bootstrap interval. A model is a checkpoint, a `skinet cv` folder (the "
        "ensemble of its folds), a folder of predicted masks, or several of them (seeds: "
        "NAME=RUN1,RUN2), whose runs are resampled too.",
    )
    compare.add_argument(
        "models",
        nargs="+",
        type=model_spec,
        metavar="[NAME=]PATH[,PATH...]",
        help="the reference model first; PATH is a checkpoint, a `skinet cv` folder (its "
        "folds' ensemble) or a folder of predicted masks (with a subfolder per set, or one "
        "set's masks); several comma-separated PATHs are runs of one model",
    )
    compare.add_argument(
        "--external",
        action="append",
        default=[],
        type=external_set,
        metavar="NAME=IMAGES:MASKS",
        help="a labelled folder to compare on (repeatable)",
    )
    add_data_dir_options(compare, "the first checkpoint")
    compare.add_argument(
        "--split",
        default="none",
        choices=(*SPLIT_CHOICES, "none"),
        help="split of the data folder to compare on (default none: only --external)",
    )
    compare.add_argument(
        "-o", "--output", type=Path, default=Path("comparison"), help="folder for the reports"
    )
    compare.add_argument(
        "--draws", type=positive_int, default=10_000, help="bootstrap resamples (default 10000)"
    )
    compare.add_argument(
        "--confidence", type=probability, default=0.95, help="interval coverage (default 0.95)"
    )
    compare.add_argument("--seed", type=int, default=0, help="seed of the resampling (default 0)")
    compare.add_argument(
        "--paired-runs",
        action="store_true",
        help="resample run i of every model together: the runs belong together (fine-tuned "
        "or calibrated from the same source models, in the same order; each index a "
        "different source model; checkpoints from other sources are refused); every model "
        "needs as many runs",
    )
    add_model_options(compare)
    compare.add_argument(
        "--options",
        action="append",
        default=[],
        type=model_options,
        metavar="NAME=FLAGS",
        help=f"prediction flags for one model's checkpoints, over the command's ({OPTION_FLAGS};"
        " repeatable): one checkpoint given twice, e.g. plain=CKPT flips=CKPT "
        "--options 'flips=--tta'",
    )
    add_leak_option(compare)
    compare.set_defaults(func=run_compare)
