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
  ``kfold_<variant>`` (``kfold_guarded``, ...): the same with a variant's overrides;
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
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from skinet.runtime.allocator import MALLOC_ENV

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
from clinic_tables import BLEND, CALIBRATED, FLIPS, SHIPPED, SOURCE, blended_base, tables  # noqa: E402
from study_cells import parse_definitions  # noqa: E402  (the same --define syntax)

KEEP_THRESHOLD = "keep_threshold"
KEEP_OVERRIDE = "TRAIN_CONFIG.optimal_threshold"
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
SCORES_FILE = "scores.json"


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


def _skinet(
    args: argparse.Namespace, command: list[str], adapt: Path, arm_dir: Path, overrides: dict
) -> int:
    """Run ``skinet <command>`` on the adapt images, its output in ``arm_dir/train.log``."""
    command = [sys.executable, "-m", "skinet.cli.main", *command, "--config", str(args.config)]
    settings = {
        "TRAIN_CONFIG.init_checkpoint": str(args.checkpoint),
        "DATA_CONFIG.data_dir": str(adapt),
        "TRAIN_CONFIG.output_dir": str(arm_dir / "runs"),
        "TRAIN_CONFIG.enable_progress_bar": False,
        "TRAIN_CONFIG.use_mlflow_logger": False,
        "TRAIN_CONFIG.seed": args.seed,
        **overrides,
    }
    for key, value in settings.items():
        command += ["--set", f"{key}={json.dumps(value)}"]
    with (arm_dir / "train.log").open("w") as log:
        return subprocess.run(
            command, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, **MALLOC_ENV}
        ).returncode


def fine_tune_folds(
    args: argparse.Namespace, adapt: Path, arm_dir: Path, overrides: dict[str, Any]
) -> tuple[list[Path], dict[str, Any]]:
    """``skinet cv --folds K`` with the fine-tuning config; the cv folder (its ensemble)."""
    code = _skinet(args, ["cv", "--folds", str(args.folds)], adapt, arm_dir, overrides)
    cv_dirs = sorted((arm_dir / "runs").glob("cv_*"))
    if code != 0 or not cv_dirs:
        raise RuntimeError(f"skinet cv exited {code}; see {arm_dir / 'train.log'}")
    runs = trained_runs(arm_dir)
    thresholds = [run["metrics"]["val_optimal_threshold"] for run in runs]
    chosen = json.loads((cv_dirs[0] / "cv_results.json").read_text()).get("ensemble_threshold")
    info = {
        "epochs": round(float(np.mean([run["epochs_trained"] for run in runs])), 1),
        "best_epoch": None,
        "fit_seconds": round(float(sum(run["fit_seconds"] for run in runs)), 1),
        "threshold": float(np.mean(thresholds)) if chosen is None else chosen["value"],
        "fold_thresholds": thresholds,
        "stopped_by": [run.get("stopped_by") for run in runs],
    }
    return [cv_dirs[0]], info


def fine_tune(
    args: argparse.Namespace, adapt: Path, arm_dir: Path, overrides: dict[str, Any]
) -> tuple[list[Path], dict[str, Any]]:
    """``skinet train --config configs/clinic.yaml --init-from CKPT`` on the adapt images."""
    code = _skinet(args, ["train", "--no-visualize"], adapt, arm_dir, overrides)
    runs = trained_runs(arm_dir)
    if code != 0 or not runs:
        raise RuntimeError(f"skinet train exited {code}; see {arm_dir / 'train.log'}")
    trained = runs[-1]
    metrics = trained.get("metrics", {})
    info = {
        "epochs": trained.get("epochs_trained"),
        "best_epoch": metrics.get("best_epoch"),
        "fit_seconds": trained.get("fit_seconds"),
        "threshold": metrics.get("val_optimal_threshold", overrides.get(KEEP_OVERRIDE)),
        "stopped_by": trained.get("stopped_by"),
    }
    return [Path(trained["best_checkpoint"])], info


def trained_runs(arm_dir: Path) -> list[dict[str, Any]]:
    """The ``metrics.json`` of each model a fine-tuning arm trained: each fold's of its cv, or
    its latest run's."""
    cv_dirs = sorted((arm_dir / "runs").glob("cv_*"))
    if cv_dirs:
        folds = sorted(cv_dirs[0].glob("results/fold_*.json"))
        paths = [Path(json.loads(p.read_text())["run_dir"]) / "metrics.json" for p in folds]
    else:
        trained = (arm_dir / "runs").glob("*/metrics.json")
        paths = sorted(trained, key=lambda p: p.stat().st_mtime)[-1:]
    return [json.loads(path.read_text()) for path in paths]


def fine_tuned_checkpoints(arm_dir: Path) -> list[Path]:
    """The best checkpoint of each model a fine-tuning arm trained: its run's, or each fold's."""
    return [Path(run["best_checkpoint"]) for run in trained_runs(arm_dir)]


def blend_arm(
    source: Path, base_dir: Path, arm_dir: Path, weight: float
) -> tuple[list[Path], dict[str, Any]]:
    """WiSE-FT (Wortsman et al., 2022): each model of the fine-tuning arm in ``base_dir`` with
    its weights interpolated with the source's, ``(1 - weight) * source + weight * tuned``.
    A weight the source lacks (a head added while fine-tuning) is kept as tuned. The blends
    keep the rest of their checkpoints (config, the model they started from; no optimizer
    state) and are scored as the base arm is: alone, or as the ensemble of the folds, at the
    base arm's threshold."""
    import torch

    from skinet.checkpoints.read import read_checkpoint_file
    from skinet.checkpoints.state_dict import normalize_state_dict_keys

    start = normalize_state_dict_keys(read_checkpoint_file(source)["state_dict"])
    tuned_models = fine_tuned_checkpoints(base_dir)
    blends = []
    for k, tuned in enumerate(tuned_models, 1):
        checkpoint = read_checkpoint_file(tuned)
        state = normalize_state_dict_keys(checkpoint["state_dict"])
        differ = [key for key in start if key not in state or state[key].shape != start[key].shape]
        if differ:
            raise SystemExit(
                f"{arm_dir.name}: {tuned} is not a fine-tuned copy of {source}: its weights "
                f"{differ[:3]} are missing or of another shape"
            )
        checkpoint["state_dict"] = {
            key: torch.lerp(start[key].to(value.dtype), value, weight)
            if key in start and value.is_floating_point()
            else value
            for key, value in state.items()
        }
        for training_state in ("optimizer_states", "lr_schedulers"):
            checkpoint.pop(training_state, None)
        blends.append(arm_dir / f"blend_{k}.ckpt")
        torch.save(checkpoint, blends[-1])
    threshold = json.loads((base_dir / SCORES_FILE).read_text())["threshold"]
    info = {"threshold": threshold, "blend": weight, "blended_from": [str(p) for p in tuned_models]}
    return blends, {**info, "blended": [str(p) for p in blends]}


def is_current(record: dict[str, Any], arm: str, arm_dir: Path, blend: float) -> bool:
    """Whether a finished arm still holds: a blend only with the same weight and the same
    models of its base arm (a base run again, or another ``--blend``, blends again)."""
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
    elif (variant := kfold_variant(arm)) is not None:
        checkpoints, info = fine_tune_folds(args, adapt, arm_dir, dict(options[variant]))
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


def source_threshold(checkpoint: Path) -> float:
    from skinet.checkpoints.read import load_checkpoint

    return float(load_checkpoint(checkpoint).threshold)


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
