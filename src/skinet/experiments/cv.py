"""k-fold cross-validation: one model per fold, the test split untouched, mean +- std.

The training and validation samples are pooled and cut into ``k`` folds by
``DATA_CONFIG.split_random_seed``; fold ``i`` validates on chunk ``i`` and trains on the rest,
and every fold tests on the original test split. Each fold is an ordinary training run whose
split is fixed by a split file (``<cv folder>/splits/fold_<i>.csv``), nested under one MLflow
parent run. A fold that finished has ``results/fold_<i>.json`` with the cv's resolved config
(less the logging-only fields, :data:`LOGGING_ONLY`) and its SHA-256; a restarted cv skips it
when the config is the same, and refuses, naming the fields that changed, when it is not (a
rerun after changing ``lr``, the epochs or the data would otherwise report old folds, or mix
them with new ones).

The out-of-fold scores pool each fold's best model on its own validation chunk. That chunk
chose the fold's best epoch and threshold, so they are validation figures of the single fold
models, optimistic as every validation figure is; the test split is the unbiased one.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from skinet.checkpoints.cv_folder import CV_RESULTS_DIR, CV_SUMMARY_FILE, CV_TABLE_FILE
from skinet.checkpoints.threshold import ENSEMBLE_THRESHOLD
from skinet.config.errors import UsageError
from skinet.config.experiment import ExperimentConfig
from skinet.datasets.locate import index_dataset
from skinet.datasets.splits import write_split_file
from skinet.experiments.mlflow_parent import start_group_run
from skinet.experiments.out_of_fold import score_out_of_fold
from skinet.experiments.search_space import config_with_overrides
from skinet.experiments.summary import print_table, summarize_runs, write_csv, write_json
from skinet.tracking import runs as tracking_runs
from skinet.tracking.mlflow_utils import resolve_tracking_uri

log = logging.getLogger(__name__)


@dataclass
class CvResult:
    """Per-fold metrics, their mean and std, and where the cv wrote them."""

    cv_dir: Path
    monitor: str
    per_fold: dict[int, dict[str, float]]
    mean: dict[str, float]
    std: dict[str, float]
    checkpoints: dict[int, str | None]
    parent_run_id: str | None
    skipped: list[int]
    """Folds found finished from an earlier, interrupted invocation."""
    out_of_fold: dict[str, Any] | None = None
    """The summary of :func:`score_out_of_fold` (``None`` until scored, or without it)."""

    def rows(self) -> list[dict[str, Any]]:
        """One row per fold, then the mean and std rows."""
        names = list(self.mean)
        rows: list[dict[str, Any]] = [
            {"fold": str(fold), **{n: metrics.get(n) for n in names}}
            for fold, metrics in sorted(self.per_fold.items())
        ]
        rows.append({"fold": "mean", **self.mean})
        rows.append({"fold": "std", **self.std})
        return rows


def cv_folder(cfg: ExperimentConfig, folds: int) -> Path:
    """``<output_dir>/cv_<experiment_name>_k<folds>``: the same for a restart."""
    return Path(cfg.train.output_dir) / f"cv_{cfg.train.experiment_name}_k{folds}"


LOGGING_ONLY = {
    "TRAIN_CONFIG": (
        "log_every_n_steps",
        "enable_progress_bar",
        "progress_log_interval_sec",
        "system_metrics_interval_sec",
        "use_litlogger_logger",
        "litlogger_config",
    ),
}
"""Fields that change what a run logs, not what it trains: a cv rerun may change them."""


def fold_config(cfg: ExperimentConfig) -> dict[str, Any]:
    """The resolved config a cv trains its folds from, less :data:`LOGGING_ONLY`."""
    data = cfg.to_yaml_dict()
    for section, names in LOGGING_ONLY.items():
        for name in names:
            data[section].pop(name, None)
    return data


def config_hash(cfg: ExperimentConfig) -> str:
    """SHA-256 of :func:`fold_config`."""
    encoded = json.dumps(fold_config(cfg), sort_keys=True, default=str).encode()
    return hashlib.sha256(encoded).hexdigest()


def _changed_fields(before: Any, after: Any, path: str = "") -> list[str]:
    """``PATH: before -> after`` for every leaf that differs between two plain configs."""
    if isinstance(before, dict) and isinstance(after, dict):
        return [
            change
            for key in sorted(set(before) | set(after), key=str)
            for change in _changed_fields(
                before.get(key), after.get(key), f"{path}.{key}" if path else str(key)
            )
        ]
    return [] if before == after else [f"{path}: {before!r} -> {after!r}"]


def _check_same_config(done: dict[str, Any], cfg: ExperimentConfig, result_path: Path) -> None:
    expected = config_hash(cfg)
    found = done.get("config_sha256")
    recorded = done.get("config")
    whole = json.dumps(cfg.to_yaml_dict(), sort_keys=True, default=str).encode()
    if found == expected or (recorded is None and found == hashlib.sha256(whole).hexdigest()):
        return  # the same config (fold files without "config" hashed all of it)
    if isinstance(recorded, dict):
        changes = _changed_fields(recorded, fold_config(cfg))
        what = "changes " + "; ".join(changes[:8]) + (" ..." if len(changes) > 8 else "")
    else:  # written before the fold files recorded their config
        what = f"has SHA-256 {expected}, the folds' {found or 'not recorded'}"
    raise UsageError(
        f"{result_path.parent.parent} holds folds trained from another config: this config "
        f"{what}. Their results would be reported as this config's. Run with the folds' config, "
        "remove that folder to start again, or give this experiment another "
        "TRAIN_CONFIG.experiment_name (logging-only fields such as "
        "TRAIN_CONFIG.log_every_n_steps may change)"
    )


def carve_folds(cfg: ExperimentConfig, folds: int) -> list[dict[str, list[str]]]:
    """The ``train``/``val``/``test`` ids of each fold (test: the config's test split)."""
    _, splits = index_dataset(cfg)
    pool = sorted(s.id for name in ("train", "val") for s in splits.get(name, []))
    if folds < 2:
        raise UsageError(f"--folds must be at least 2, got {folds}")
    if len(pool) < folds:
        raise UsageError(
            f"--folds {folds}: only {len(pool)} training + validation samples to split"
        )
    order = np.random.default_rng(cfg.data.split_random_seed).permutation(len(pool))
    chunks = [[pool[i] for i in chunk] for chunk in np.array_split(order, folds)]
    test = sorted(s.id for s in splits.get("test", []))
    return [
        {
            "train": sorted(i for j, c in enumerate(chunks) if j != fold for i in c),
            "val": sorted(chunks[fold]),
            "test": test,
        }
        for fold in range(folds)
    ]


def run_cv(
    cfg: ExperimentConfig,
    folds: int,
    run_training_fn: Callable[..., Any] | None = None,
    tune_tta: bool = False,
) -> CvResult:
    """Train one model per fold (skipping finished folds), then summarise, write and log.

    The out-of-fold pass (:func:`~skinet.experiments.out_of_fold.score_out_of_fold`) runs
    every time, so a finished cv run again with ``tune_tta`` decides flips without training."""
    if run_training_fn is None:
        from skinet.training.run import run_training

        run_training_fn = run_training
    cv_dir = cv_folder(cfg, folds)
    expected = config_hash(cfg)
    for fold in range(1, folds + 1):  # refuse before anything trains or is reopened
        result_path = cv_dir / CV_RESULTS_DIR / f"fold_{fold}.json"
        if result_path.is_file():
            _check_same_config(json.loads(result_path.read_text()), cfg, result_path)
    fold_splits = carve_folds(cfg, folds)
    name = cv_dir.name
    parent = start_group_run(cfg, name, {"skinet.kind": "cv"}, reuse=True)
    uri = resolve_tracking_uri(cfg) if parent is not None else None
    per_fold: dict[int, dict[str, float]] = {}
    checkpoints: dict[int, str | None] = {}
    skipped: list[int] = []
    for fold, ids in enumerate(fold_splits, start=1):
        result_path = cv_dir / CV_RESULTS_DIR / f"fold_{fold}.json"
        if result_path.is_file():
            done = json.loads(result_path.read_text())
            per_fold[fold], checkpoints[fold] = done["metrics"], done["best_checkpoint"]
            skipped.append(fold)
            log.info("fold %d of %d already finished (%s); skipping", fold, folds, result_path)
            continue
        if parent is not None and uri is not None:
            tracking_runs.terminate_open_child_runs(uri, parent, f"fold_{fold}")
        split_file = write_split_file(ids, cv_dir / "splits" / f"fold_{fold}.csv")
        overrides = {
            "DATA_CONFIG.split_file": str(split_file.resolve()),
            "TRAIN_CONFIG.output_dir": str(cv_dir),
            "DATA_CONFIG.max_samples_per_split": None,  # the folds are already cut from it
            # the default store lives in output_dir: keep the folds beside their parent run
            "TRAIN_CONFIG.mlflow_config.tracking_uri": resolve_tracking_uri(cfg),
        }
        fold_cfg = config_with_overrides(cfg, overrides, f"cv fold {fold}")
        log.info("fold %d of %d: %d train, %d val", fold, folds, len(ids["train"]), len(ids["val"]))
        result = run_training_fn(
            fold_cfg, visualize=False, parent_run_id=parent, run_name=f"fold_{fold}"
        )
        per_fold[fold] = {k: float(v) for k, v in result.metrics.items()}
        checkpoints[fold] = str(result.best_checkpoint) if result.best_checkpoint else None
        write_json(
            result_path,
            {
                "fold": fold,
                "config_sha256": expected,
                "config": fold_config(cfg),
                "metrics": per_fold[fold],
                "best_checkpoint": checkpoints[fold],
                "run_dir": str(result.run_dir),
                "mlflow_run_id": result.mlflow_run_id,
            },
        )
    out_of_fold = score_out_of_fold(cfg, cv_dir, fold_splits, checkpoints, tune_tta)
    cv = _summarise(cfg, cv_dir, per_fold, checkpoints, parent, skipped, out_of_fold)
    if parent is not None and uri is not None:
        _log_parent(uri, parent, cv)
    return cv


def _summarise(
    cfg: ExperimentConfig,
    cv_dir: Path,
    per_fold: dict[int, dict[str, float]],
    checkpoints: dict[int, str | None],
    parent: str | None,
    skipped: list[int],
    out_of_fold: dict[str, Any] | None,
) -> CvResult:
    monitor = cfg.sweep.monitor
    mean, std = summarize_runs(monitor, per_fold)
    cv = CvResult(cv_dir, monitor, per_fold, mean, std, checkpoints, parent, skipped, out_of_fold)
    chosen = None if out_of_fold is None else out_of_fold.get(ENSEMBLE_THRESHOLD)
    write_csv(cv_dir / CV_TABLE_FILE, cv.rows())
    write_json(
        cv_dir / CV_SUMMARY_FILE,
        {
            "monitor": monitor,
            "folds": len(per_fold),
            "split_random_seed": cfg.data.split_random_seed,
            "mean": mean,
            "std": std,
            "per_fold": {str(f): m for f, m in sorted(per_fold.items())},
            "best_checkpoints": {str(f): c for f, c in sorted(checkpoints.items())},
            "mlflow_parent_run_id": parent,
            **({} if chosen is None else {ENSEMBLE_THRESHOLD: chosen}),
        },
    )
    print_table(f"{cv_dir.name}: {len(per_fold)}-fold cross-validation", cv.rows())
    return cv


def _log_parent(uri: str, parent: str, cv: CvResult) -> None:
    metrics = {f"{k}_mean": v for k, v in cv.mean.items()}
    metrics.update({f"{k}_std": v for k, v in cv.std.items()})
    if cv.out_of_fold is not None:
        metrics["out_of_fold_val_mean_jaccard"] = cv.out_of_fold["mean_jaccard"]
        metrics["out_of_fold_val_mean_dice"] = cv.out_of_fold["mean_dice"]
    tracking_runs.log_metrics(uri, parent, metrics)
    for name in (CV_TABLE_FILE, CV_SUMMARY_FILE):
        tracking_runs.log_artifact(uri, parent, cv.cv_dir / name)
    tracking_runs.finish_run(uri, parent)
