"""The command line of ``study_clinic.py``: its parser, and the checks of what it was given
before anything is split or trained (a bad value is a usage error, exit 2)."""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from clinic_tables import BLEND, CALIBRATED, FLIPS, SHIPPED, SOURCE, TTA, blended_base, flipped_base

REPO = Path(__file__).resolve().parents[1]

KFOLD = "kfold"
CALIBRATIONS = ("per_image", "guarded", FLIPS)
"""``--calibrations``: arms ``calibrated_<name>``."""
SOURCE_FLIPS = f"{SOURCE}_{FLIPS}"


def kfold_variant(arm: str) -> str | None:
    """The fine-tuning variant of a ``kfold`` or ``kfold_<variant>`` arm (``None``: neither)."""
    if arm == KFOLD:
        return SHIPPED
    return arm.removeprefix(f"{KFOLD}_") if arm.startswith(f"{KFOLD}_") else None


def build_parser(description: str) -> argparse.ArgumentParser:
    from skinet.cli.arguments import external_set

    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--checkpoint", type=Path, help="the source model")
    parser.add_argument("--output", type=Path, required=True, help="folder of the study")
    parser.add_argument(
        "--source",
        action="append",
        type=external_set,
        default=[],
        metavar="NAME=IMAGES:MASKS",
        help="the labelled images of one source (repeatable)",
    )
    parser.add_argument(
        "--config", type=Path, default=REPO / "configs" / "clinic.yaml", help="fine-tuning config"
    )
    parser.add_argument("--variants", default="finetune", help="comma-separated variants")
    parser.add_argument(
        "--calibrations",
        default="",
        help="more calibration arms: comma-separated per_image, guarded, flips (guarded, "
        "deciding flips too; adds guarded and source_flips)",
    )
    parser.add_argument(
        "--define", action="append", default=[], metavar="NAME=SECTION.KEY=VALUE[;...]"
    )
    parser.add_argument("--adapt", type=int, default=50, help="adapt images per source")
    parser.add_argument("--split-seed", type=int, default=0, help="seed of the adapt/check split")
    parser.add_argument("--seed", type=int, default=42, help="TRAIN_CONFIG.seed of fine-tuning")
    parser.add_argument("--folds", type=int, default=5, help="folds of the kfold variant")
    parser.add_argument(
        "--blend",
        type=float,
        default=0.5,
        help="wise_<arm>: the weight of the fine-tuned model, 1 - it the source's (default 0.5)",
    )
    parser.add_argument("--list", action="store_true", help="list the variants and exit")
    parser.add_argument("--table", action="store_true", help="print the tables and exit")
    parser.add_argument(
        "--pool",
        type=Path,
        action="append",
        default=[],
        metavar="STUDY",
        help="with --table: pool these studies with --output's (the same sources and arms, "
        "another source model each); a source model's arms are resampled together",
    )
    parser.add_argument(
        "--against",
        action="append",
        default=[],
        metavar="ARM",
        help="with --table: one more table, every arm against this one (repeatable)",
    )
    return parser


def read_study(parser: argparse.ArgumentParser, option: str, folder: Path) -> dict[str, Any]:
    path = folder / "results.json"
    if not path.is_file():
        parser.error(f"{option} {folder}: no {path.name} (is it a study_clinic.py output?)")
    return json.loads(path.read_text())


def parse_variants(args: argparse.Namespace, options: dict[str, Any]) -> list[str]:
    """``--variants`` as a list.

    Raises:
        ValueError: An unknown variant, a blend before its arm, a weight outside [0, 1], or a
            ``--define`` with the name of one of the study's own arms.
    """
    reserved = [name for name in options if _derived_base(name) or kfold_variant(name)]
    if reserved:
        raise ValueError(
            f"--define {reserved}: names that start with {KFOLD}, {BLEND}_ or {TTA}_ are the "
            "study's own arms; name the variant otherwise"
        )
    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    known = [v for v in variants if v in options or kfold_variant(v) in options]
    unknown = [v for v in variants if v not in known and _derived_base(v) not in known]
    if unknown:
        raise ValueError(f"unknown variant(s) {unknown}; see --list")
    for k, arm in enumerate(variants):
        if (base := blended_base(arm)) is not None and base not in variants[:k]:
            raise ValueError(f"{arm} blends the arm {base} with the source: list {base} before it")
        if (base := flipped_base(arm)) is not None:
            if kfold_variant(base) is None:
                raise ValueError(f"{arm}: flips are chosen out of fold, {base} is no {KFOLD} arm")
            if base not in variants[:k]:
                raise ValueError(f"{arm} scores the folds of {base}: list {base} before it")
    if not 0.0 <= args.blend <= 1.0:
        raise ValueError(f"--blend {args.blend}: the weight of the fine-tuned model, in [0, 1]")
    return variants


def _derived_base(arm: str) -> str | None:
    return blended_base(arm) or flipped_base(arm)


def parse_calibrations(text: str) -> list[str]:
    """``--calibrations`` as arms. ``flips`` brings the arms it is tabled against with it:
    ``calibrated_guarded`` (the same calibration without ``--tune-tta``) and ``source_flips``.

    Raises:
        ValueError: An unknown calibration, or one named twice.
    """
    names = [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in names if name not in CALIBRATIONS]
    if unknown:
        raise ValueError(f"--calibrations {unknown}: choose from {', '.join(CALIBRATIONS)}")
    if len(set(names)) != len(names):
        raise ValueError(f"--calibrations {names}: each calibration once")
    if FLIPS in names and "guarded" not in names:
        names.insert(names.index(FLIPS), "guarded")
    arms = [f"{CALIBRATED}_{name}" for name in names]
    return arms + [SOURCE_FLIPS] if FLIPS in names else arms


def paired_sources(sources: Sequence[Any], adapt: int) -> dict[str, list[Any]]:
    """The labelled pairs of every ``--source`` in ID order, each checked to have more than
    ``--adapt`` before any is split.

    Raises:
        ValueError: A source with too few pairs, or none.
    """
    from skinet.evaluation.mask_folders import pair_image_folder
    from skinet.imaging.errors import DatasetError

    paired = {}
    for source in sources:
        try:
            pairs = sorted(pair_image_folder(source.images, source.masks), key=lambda s: s.id)
        except DatasetError as error:
            raise ValueError(f"--source {source.name}: {error}") from None
        if len(pairs) <= adapt:
            raise ValueError(
                f"--source {source.name}: {len(pairs)} labelled pairs, need more than --adapt "
                f"{adapt}"
            )
        paired[source.name] = pairs
    return paired
