"""Clinic adaptation study: calibrate or fine-tune a model on a few labelled images of a source.

Usage::

    python benchmarks/study_clinic.py --checkpoint runs/<run>/checkpoints/best-*.ckpt \\
        --output study_clinic --source clinic_a=IMAGES:MASKS --source clinic_b=IMAGES:MASKS
    # more fine-tuning variants, an option of your own, the table of what is done
    python benchmarks/study_clinic.py ... --variants finetune,lr_high,keep_threshold \\
        --define 'patient=TRAIN_CONFIG.early_stopping_config.patience=15'
    python benchmarks/study_clinic.py --output study_clinic --table
    # the same study from three source models, pooled: each source model is a run of every arm
    python benchmarks/study_clinic.py --output study_a --table --pool study_b --pool study_c
    # one more table: every arm against the one named
    python benchmarks/study_clinic.py --output study_a --table --against calibrated_guarded

For each ``--source`` (a labelled folder of one clinic, camera or dermatoscope) the images are
split once (``--split-seed``): ``--adapt`` of them (default 50) are what a clinic labels to adapt
the model, the rest are the check set. Every arm is scored on the check set only:

- ``source``: the checkpoint as it is;
- ``calibrated``: ``skinet evaluate --tune-threshold --save-calibrated`` on the adapt images
  (``calibrated_per_image`` and ``calibrated_guarded`` with that ``--threshold-selection``, as
  extra arms: ``--calibrations``; ``calibrated_flips``: ``guarded`` with ``--tune-tta``, flips
  at prediction time decided on the adapt images too, beside ``calibrated_guarded`` and
  ``source_flips``, the source model with flips on every image);
- every fine-tuning variant: ``skinet train --config configs/clinic.yaml --init-from CKPT`` on
  the adapt images (its ``val_fraction`` keeps some of them to choose the epoch and the
  threshold) with the variant's overrides (``--list`` shows them);
- ``kfold``: ``skinet cv --folds K`` with the same config on the adapt images (each fold
  fine-tunes on the others and chooses its epoch and threshold on its own chunk), scored as the
  ensemble of the K fold models (their mean probability, at the threshold the cv chose on the
  pooled out-of-fold images), as ``skinet evaluate --checkpoint <cv folder>`` scores it;
  ``kfold_<variant>`` (``kfold_guarded``, ...): the same with a variant's overrides; the cv
  runs with ``--tune-tta``, and a k-fold arm is scored without flips at the threshold chosen
  without them;
- ``tta_<kfold arm>`` (``tta_kfold``, ...): the same folds with the flips and threshold their
  cv chose on the out-of-fold images (``skinet cv --tune-tta``), nothing retrained;
- ``wise_<arm>`` (``wise_finetune``, ``wise_kfold``, ...): the models an earlier fine-tuning arm
  trained, each with its weights interpolated with the source's (WiSE-FT, Wortsman et al. 2022:
  ``(1 - w) * source + w * fine-tuned``, ``w = --blend``, default 0.5), nothing retrained.

The tables compare every arm with ``source``, with ``calibrated`` and with ``finetune`` (the
shipped config), each ``wise_<arm>`` with ``<arm>`` and ``calibrated_flips`` with
``calibrated_guarded``: mean per-image Jaccard and paired
bootstrap intervals (``skinet compare``'s statistics), per source and over the mean of the
sources; pooled studies (``--pool``) resample the source models as well, each source model's
arms together. Resumable: each arm's per-image scores are kept in
``OUTPUT/<source>/<arm>/scores.json`` and a restart skips finished arms.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from clinic_args import (  # noqa: E402
    KFOLD,
    SOURCE_FLIPS,
    build_parser,
    kfold_variant,
    paired_sources,
    parse_calibrations,
    parse_variants,
    read_study,
)
from clinic_arms import (  # noqa: E402
    KEEP_OVERRIDE,
    SCORES_FILE,
    blend_arm,
    fine_tune,
    fine_tune_folds,
    fine_tuned_checkpoints,
    flipped_folds,
    out_of_fold_choice,
    source_threshold,
)
from clinic_tables import (  # noqa: E402
    BLEND,
    CALIBRATED,
    FLIPS,
    SHIPPED,
    SOURCE,
    TTA,
    blended_base,
    flipped_base,
    tables,
)
from study_cells import parse_definitions  # noqa: E402  (the same --define syntax)

KEEP_THRESHOLD = "keep_threshold"
VARIANTS: dict[str, dict[str, Any]] = {
    SHIPPED: {},
    KEEP_THRESHOLD: {},  # TRAIN_CONFIG.optimal_threshold: the source checkpoint's threshold
    "lr_high": {"TRAIN_CONFIG.lr": 3.0e-4},
    "lr_low": {"TRAIN_CONFIG.lr": 3.0e-5},
    "patient": {"TRAIN_CONFIG.early_stopping_config.patience": 15, "TRAIN_CONFIG.max_epochs": 60},
    "no_aug": {"TRANSFORM_CONFIG.train_transforms": []},
    "flips": {
        "TRANSFORM_CONFIG.train_transforms": [
            {"name": name, "params": {"p": 0.5}}
            for name in ("HorizontalFlip", "VerticalFlip", "RandomRotate90")
        ]
    },
    "guarded": {"TRAIN_CONFIG.threshold_selection": "guarded"},
    "per_image": {"TRAIN_CONFIG.threshold_selection": "per_image"},
    "freeze": {"TRAIN_CONFIG.freeze_encoder_epochs": 3},
}
"""Fine-tuning variant -> config overrides on top of ``configs/clinic.yaml``."""


def split_source(
    name: str, pairs: Sequence[Any], output: Path, adapt: int, seed: int
) -> tuple[Path, Path]:
    """Link ``adapt`` random ``pairs`` (in ID order) into ``OUTPUT/<name>/adapt`` and the rest
    into ``check`` (``images/<id>.<ext>``, ``masks/<id>_mask.png``); the two folders."""
    order = np.random.default_rng(seed).permutation(len(pairs))
    chosen = {pairs[i].id for i in order[:adapt]}
    folders = {"adapt": output / name / "adapt", "check": output / name / "check"}
    for folder in folders.values():
        shutil.rmtree(folder, ignore_errors=True)
        (folder / "images").mkdir(parents=True)
        (folder / "masks").mkdir()
    for pair in pairs:
        folder = folders["adapt" if pair.id in chosen else "check"]
        image_link = folder / "images" / f"{pair.id}{pair.image_path.suffix}"
        image_link.symlink_to(pair.image_path.resolve())
        mask_link = folder / "masks" / f"{pair.id}_mask{pair.mask_path.suffix}"
        mask_link.symlink_to(pair.mask_path.resolve())
    return folders["adapt"], folders["check"]


def score(
    checkpoints: Sequence[Path],
    check: Path,
    threshold: float | None = None,
    tta: bool | None = None,
) -> dict[str, float]:
    """Per-image Jaccard of ``checkpoints`` (a file, several: their ensemble, or a cv folder:
    its ensemble) on the check folder, at ``threshold`` (``None``: the checkpoints' own), with
    flips if ``tta`` (``None``: as a calibrated checkpoint chose)."""
    from skinet.evaluation.compare import score_samples
    from skinet.evaluation.mask_folders import pair_image_folder
    from skinet.inference.ensemble import build_predictor

    predictor = build_predictor(list(checkpoints), threshold=threshold, device="cpu", tta=tta)
    return score_samples(predictor, pair_image_folder(check / "images", check / "masks"), False)


def calibrate(
    args: argparse.Namespace, adapt: Path, arm_dir: Path, selection: str
) -> tuple[list[Path], dict[str, Any]]:
    """``skinet evaluate --tune-threshold --save-calibrated`` on the adapt images (``flips``:
    ``guarded`` deciding flips too, ``--tune-tta``)."""
    from skinet.cli.main import main as skinet_main

    calibrated = arm_dir / "calibrated.ckpt"
    command = ["evaluate", "--checkpoint", str(args.checkpoint), "--images", str(adapt / "images")]
    command += ["--masks", str(adapt / "masks"), "--tune-threshold", "--gallery", "0"]
    if selection == FLIPS:
        command += ["--threshold-selection", "guarded", "--tune-tta"]
    else:
        command += ["--threshold-selection", selection]
    command += ["--save-calibrated", str(calibrated), "--output", str(arm_dir / "evaluate")]
    code = skinet_main(command)
    if code not in (0, 1) or not calibrated.is_file():
        raise RuntimeError(f"skinet evaluate --save-calibrated exited {code}")
    summary = json.loads((arm_dir / "evaluate" / "summary.json").read_text())
    return [calibrated], {"threshold": summary.get("threshold"), "tta": summary.get("tta")}


def is_current(record: dict[str, Any], arm: str, arm_dir: Path, blend: float) -> bool:
    """Whether a finished arm still holds: a blend only with the same weight and the same
    models of its base arm (a base run again, or another ``--blend``, blends again); a
    ``tta_<arm>`` only with its base arm's choice."""
    if (flipped := flipped_base(arm)) is not None:
        return record.get("flips_choice") == out_of_fold_choice(arm_dir.parent / flipped)
    base = blended_base(arm)
    if base is None:
        return True
    tuned = [str(p) for p in fine_tuned_checkpoints(arm_dir.parent / base)]
    return record.get("blend") == blend and record.get("blended_from") == tuned


def run_arm(
    args: argparse.Namespace, name: str, folders: tuple[Path, Path], arm: str, options: dict
) -> dict[str, Any]:
    """Adapt (or not) and score one arm; its record with the per-image scores."""
    adapt, check = folders
    arm_dir = args.output / name / arm
    done = arm_dir / SCORES_FILE
    if done.is_file():
        record = json.loads(done.read_text())
        if is_current(record, arm, arm_dir, args.blend):
            return record
    shutil.rmtree(arm_dir, ignore_errors=True)
    arm_dir.mkdir(parents=True)
    started = time.perf_counter()
    threshold = None  # each checkpoint's own; a cv folder's: the one its cv chose
    tta = None  # as a calibration chose
    if arm in (SOURCE, SOURCE_FLIPS):
        checkpoints, info = [args.checkpoint], {"threshold": source_threshold(args.checkpoint)}
        tta = arm == SOURCE_FLIPS
    elif arm.startswith(CALIBRATED):
        selection = arm.removeprefix(CALIBRATED).lstrip("_") or "pooled_dice"
        checkpoints, info = calibrate(args, adapt, arm_dir, selection)
    elif (base := blended_base(arm)) is not None:
        checkpoints, info = blend_arm(args.checkpoint, arm_dir.parent / base, arm_dir, args.blend)
        threshold = info["threshold"]
    elif (base := flipped_base(arm)) is not None:
        checkpoints, info = flipped_folds(arm_dir.parent / base)
    elif (variant := kfold_variant(arm)) is not None:
        checkpoints, info = fine_tune_folds(args, adapt, arm_dir, dict(options[variant]))
        threshold, tta = info["threshold"], False
    else:
        overrides = dict(options[arm])
        if arm == KEEP_THRESHOLD:
            overrides[KEEP_OVERRIDE] = source_threshold(args.checkpoint)
        checkpoints, info = fine_tune(args, adapt, arm_dir, overrides)
    record = {**info, "scores": score(checkpoints, check, threshold, tta)}
    record["wall_seconds"] = round(time.perf_counter() - started, 1)
    tmp = done.with_name(f".{SCORES_FILE}.partial")
    tmp.write_text(json.dumps(record, indent=1))
    os.replace(tmp, done)
    return record


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser(__doc__.split("\n\n")[0])
    args = parser.parse_args(argv)
    options = {**VARIANTS, **parse_definitions(args.define)}
    if args.list:
        for name, overrides in options.items():
            print(f"{name}: {overrides or 'configs/clinic.yaml as it is'}")
        print(f"{KFOLD}: skinet cv --folds {args.folds}, scored as the ensemble of the folds")
        print(f"{KFOLD}_<variant>: the same with the variant's overrides")
        print(f"{BLEND}_<arm>: <arm>'s fine-tuned weights blended with the source's (--blend)")
        print(f"{TTA}_<{KFOLD} arm>: its folds with the flips their cv chose out of fold")
        return 0
    if args.table:
        studies = [read_study(parser, "--output", args.output)]
        studies += [read_study(parser, "--pool", folder) for folder in args.pool]
        try:
            print(tables(studies, args.against))
        except ValueError as error:
            parser.error(str(error))
        return 0
    if args.pool or args.against:
        parser.error("--pool and --against read finished studies: give them with --table")
    results_path = args.output / "results.json"
    records: dict[str, dict[str, dict[str, Any]]] = (
        json.loads(results_path.read_text()) if results_path.is_file() else {}
    )
    if args.checkpoint is None or not args.checkpoint.is_file():
        parser.error(f"--checkpoint must be a checkpoint file, got {args.checkpoint}")
    try:
        variants = parse_variants(args, options)
        calibrations = parse_calibrations(args.calibrations)
        paired = paired_sources(args.source, args.adapt)
    except ValueError as error:
        parser.error(str(error))
    for source in args.source:
        folders = split_source(
            source.name, paired[source.name], args.output, args.adapt, args.split_seed
        )
        for arm in (SOURCE, CALIBRATED, *calibrations, *variants):
            print(f"[run]  {source.name}/{arm} ...", flush=True)
            record = run_arm(args, source.name, folders, arm, options)
            records.setdefault(source.name, {})[arm] = record
            mean = float(np.mean(list(record["scores"].values())))
            print(f"[done] {source.name}/{arm}: check Jaccard {mean:.4f}", flush=True)
            results_path.write_text(json.dumps(records))
    text = tables([records])
    (args.output / "results.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
