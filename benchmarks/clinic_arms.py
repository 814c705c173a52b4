"""How ``study_clinic.py`` adapts a model for each fine-tuning arm: ``skinet train`` or
``skinet cv --tune-tta`` with the fine-tuning config on the adapt images, the flips choice of a
k-fold arm's folds, and WiSE-FT blends of an arm's models with the source."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np

from skinet.checkpoints.threshold import ENSEMBLE_THRESHOLD
from skinet.runtime.allocator import MALLOC_ENV

KEEP_OVERRIDE = "TRAIN_CONFIG.optimal_threshold"
"""A ``keep_threshold`` arm fixes it at the source checkpoint's threshold."""
SCORES_FILE = "scores.json"
"""Each arm's record with its per-image scores: ``OUTPUT/<source>/<arm>/scores.json``."""


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
    """``skinet cv --folds K --tune-tta`` with the fine-tuning config; the cv folder (its
    ensemble), scored without flips at the threshold chosen without them (``tta_<arm>``
    scores the same folds as the cv chose)."""
    command = ["cv", "--folds", str(args.folds), "--tune-tta"]
    code = _skinet(args, command, adapt, arm_dir, overrides)
    cv_dirs = sorted((arm_dir / "runs").glob("cv_*"))
    if code != 0 or not cv_dirs:
        raise RuntimeError(f"skinet cv exited {code}; see {arm_dir / 'train.log'}")
    runs = trained_runs(arm_dir)
    thresholds = [run["metrics"]["val_optimal_threshold"] for run in runs]
    chosen = out_of_fold_choice(arm_dir)
    info = {
        "epochs": round(float(np.mean([run["epochs_trained"] for run in runs])), 1),
        "best_epoch": None,
        "fit_seconds": round(float(sum(run["fit_seconds"] for run in runs)), 1),
        "threshold": chosen["threshold_without_tta"],
        "fold_thresholds": thresholds,
        "stopped_by": [run.get("stopped_by") for run in runs],
        "flips_choice": chosen,
    }
    return [cv_dirs[0]], info


def out_of_fold_choice(arm_dir: Path) -> dict[str, Any]:
    """The threshold and flips choice ``skinet cv --tune-tta`` made for a k-fold arm's folds."""
    cv_dirs = sorted((arm_dir / "runs").glob("cv_*"))
    results = cv_dirs[0] / "cv_results.json" if cv_dirs else None
    chosen = json.loads(results.read_text()).get(ENSEMBLE_THRESHOLD) if results else None
    if not isinstance(chosen, dict) or "tta" not in chosen:
        raise RuntimeError(
            f"{arm_dir}: no flips choice of `skinet cv --tune-tta` (a k-fold arm from before it: "
            f"delete {arm_dir / SCORES_FILE} to run its cv again, finished folds are kept)"
        )
    return chosen


def flipped_folds(base_dir: Path) -> tuple[list[Path], dict[str, Any]]:
    """A ``tta_<arm>`` arm: the folds of the k-fold arm in ``base_dir``, at the threshold and
    with the flips their cv chose on the out-of-fold images."""
    chosen = out_of_fold_choice(base_dir)
    cv_dir = sorted((base_dir / "runs").glob("cv_*"))[0]
    return [cv_dir], {"threshold": chosen["value"], "tta": chosen["tta"], "flips_choice": chosen}


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


def source_threshold(checkpoint: Path) -> float:
    from skinet.checkpoints.read import load_checkpoint

    return float(load_checkpoint(checkpoint).threshold)
