"""``train_and_evaluate``: the one place a ``Trainer`` is built, fitted and tested."""

from __future__ import annotations

import json
import logging
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import lightning as L
import yaml
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.loggers import MLFlowLogger

from skinet.callbacks import setup_logging_and_callbacks
from skinet.checkpoint_format import CHECKPOINT_KEY, CheckpointPayload
from skinet.config import ExperimentConfig
from skinet.data import build_dataloaders, visualize_augmented_data
from skinet.inference.checkpoint import CheckpointError, read_checkpoint_file
from skinet.reporting.run_records import write_run_records
from skinet.tracking import (
    make_run_name,
    mark_run_failed,
    resolve_tracking_uri,
)
from skinet.training.lightning_model import LightningModel, check_attention_upsample
from skinet.training.reproducibility import configure_reproducibility

log = logging.getLogger(__name__)

CONFIG_FILE = "config.yaml"
METRICS_FILE = "metrics.json"


@dataclass
class RunResult:
    """What one training run produced."""

    metrics: dict[str, float]
    run_name: str
    run_dir: Path
    best_checkpoint: Path | None
    mlflow_run_id: str | None
    fit_seconds: float
    epochs_trained: int


class ResumeError(ValueError):
    """A checkpoint to resume from is missing, unreadable or already past ``max_epochs``."""


def find_last_checkpoint(output_dir: str | Path) -> Path:
    """The newest ``checkpoints/last.ckpt`` among the run folders in ``output_dir``."""
    candidates = sorted(
        Path(output_dir).glob("*/checkpoints/last*.ckpt"), key=lambda p: p.stat().st_mtime
    )
    if not candidates:
        raise ResumeError(
            f"--resume last: no checkpoints/last.ckpt under {Path(output_dir).resolve()}; "
            "pass the checkpoint path instead"
        )
    return candidates[-1]


def _check_resume(checkpoint_path: Path, max_epochs: int) -> dict[str, Any]:
    """The checkpoint's contents, or a ResumeError when it is unreadable or already finished."""
    if not checkpoint_path.is_file():
        raise ResumeError(f"checkpoint to resume from not found: {checkpoint_path}")
    try:
        checkpoint = read_checkpoint_file(checkpoint_path)
    except CheckpointError as error:
        raise ResumeError(f"--resume: {error}") from None
    done = int(checkpoint.get("epoch", -1)) + 1
    if done >= max_epochs:
        raise ResumeError(
            f"{checkpoint_path} has already trained {done} epoch(s) and TRAIN_CONFIG.max_epochs is "
            f"{max_epochs}: nothing left to train. Set TRAIN_CONFIG.max_epochs above {done} "
            f"(e.g. --set TRAIN_CONFIG.max_epochs={done + 10}) to continue."
        )
    return checkpoint


def build_trainer(
    cfg: ExperimentConfig,
    run_dir: Path,
    loggers: list[Any],
    callbacks: list[Any],
    deterministic: bool | str,
) -> L.Trainer:
    """A Lightning ``Trainer`` configured from ``TRAIN_CONFIG``."""
    train_cfg = cfg.train
    accelerator = "gpu" if train_cfg.accelerator == "cuda" else train_cfg.accelerator
    optional: dict[str, Any] = {
        key: getattr(train_cfg, key)
        for key in ("gradient_clip_val", "limit_train_batches", "limit_val_batches", "max_time")
        if getattr(train_cfg, key) is not None
    }
    return L.Trainer(
        accelerator=accelerator,
        devices=train_cfg.devices,
        num_nodes=train_cfg.num_nodes,
        strategy=train_cfg.strategy,
        precision=train_cfg.precision,  # type: ignore[arg-type]
        deterministic=deterministic,  # type: ignore[arg-type]
        max_epochs=train_cfg.max_epochs,
        logger=loggers or False,
        callbacks=callbacks,
        default_root_dir=run_dir,
        log_every_n_steps=train_cfg.log_every_n_steps,
        num_sanity_val_steps=train_cfg.num_sanity_val_steps,
        accumulate_grad_batches=train_cfg.accumulate_grad_batches,
        enable_checkpointing=train_cfg.use_checkpoint,
        enable_progress_bar=train_cfg.enable_progress_bar,
        **optional,
    )


def train_and_evaluate(
    cfg: ExperimentConfig,
    visualize: bool = True,
    resume: str | Path | None = None,
    parent_run_id: str | None = None,
    run_name: str | None = None,
) -> dict[str, float]:
    """Build data, model, callbacks and loggers; fit; test the best checkpoint; return metrics.

    See :func:`run_training` for the arguments; this returns only its ``metrics``.
    """
    return run_training(cfg, visualize, resume, parent_run_id, run_name).metrics


def run_training(
    cfg: ExperimentConfig,
    visualize: bool = True,
    resume: str | Path | None = None,
    parent_run_id: str | None = None,
    run_name: str | None = None,
) -> RunResult:
    """Build data, model, callbacks and loggers; fit; test the best checkpoint.

    Args:
        cfg: The validated experiment config.
        visualize: Write a grid of augmented training samples before training.
        resume: A checkpoint to continue from, or ``"last"`` for the newest ``last.ckpt``
            under ``TRAIN_CONFIG.output_dir``; optimizer, scheduler and epoch are restored.
        parent_run_id: MLflow run to nest this run under (sweeps).
        run_name: Overrides ``{experiment_name}_seed{seed}_{timestamp}``.

    Returns:
        The run's outputs; ``metrics`` holds the monitored metric at its best epoch (under its
        own name), the last epoch's other validation metrics and every ``test_*`` metric.
    """
    train_cfg = cfg.train
    resume_path: Path | None = None
    resume_run_id: str | None = None
    if resume is not None:
        resume_path = (
            find_last_checkpoint(train_cfg.output_dir) if str(resume) == "last" else Path(resume)
        )
        payload = CheckpointPayload.from_checkpoint(
            _check_resume(resume_path, train_cfg.max_epochs), str(resume_path)
        )
        check_attention_upsample(payload, cfg)  # before any run or folder is made
        resume_run_id = payload.mlflow_run_id

    deterministic = configure_reproducibility(cfg)
    run_name = (
        run_name
        or train_cfg.mlflow_config.run_name
        or make_run_name(train_cfg.experiment_name, train_cfg.seed)
    )
    if resume_path is not None and resume_path.parent.name == "checkpoints":
        run_dir = resume_path.parent.parent
        run_name = run_dir.name
    else:
        run_dir = Path(train_cfg.output_dir) / run_name
    # Bad data and an unreachable tracking server both fail before any run folder or MLflow
    # run is made, so a failed start leaves nothing half-made behind.
    world_size = train_cfg.ddp_processes_per_node * train_cfg.num_nodes
    loaders = build_dataloaders(cfg, world_size=world_size)
    loggers, callbacks = setup_logging_and_callbacks(
        cfg, run_dir, run_name, parent_run_id, resume_run_id
    )
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / CONFIG_FILE).write_text(yaml.safe_dump(cfg.to_yaml_dict(), sort_keys=False))

    if visualize:
        visualize_augmented_data(loaders.train_dataset, run_dir / "augmented_samples.png")

    model = LightningModel(cfg.to_yaml_dict())
    trainer = build_trainer(cfg, run_dir, loggers, callbacks, deterministic)

    started = time.perf_counter()
    try:
        trainer.fit(model, loaders.train, loaders.val, ckpt_path=resume_path)
        fit_metrics = {k: float(v) for k, v in trainer.callback_metrics.items()}
        checkpoint = next((c for c in callbacks if isinstance(c, ModelCheckpoint)), None)
        best_path = checkpoint.best_model_path if checkpoint is not None else ""
        if checkpoint is not None and checkpoint.best_model_score is not None:
            fit_metrics[cfg.sweep.monitor] = float(checkpoint.best_model_score)
        test_metrics: dict[str, float] = {}
        if loaders.test is not None:
            results = trainer.test(model, loaders.test, ckpt_path=best_path or None, verbose=False)
            test_metrics = {k: float(v) for k, v in (results[0] if results else {}).items()}
    except BaseException as error:
        for logger in loggers:
            if isinstance(logger, MLFlowLogger) and logger.run_id:
                mark_run_failed(logger.run_id, resolve_tracking_uri(cfg), error)
        raise

    result = RunResult(
        metrics={**fit_metrics, **test_metrics},
        run_name=run_name,
        run_dir=run_dir.resolve(),
        best_checkpoint=Path(best_path).resolve() if best_path else None,
        mlflow_run_id=next((lg.run_id for lg in loggers if isinstance(lg, MLFlowLogger)), None),
        fit_seconds=round(time.perf_counter() - started, 2),
        epochs_trained=trainer.current_epoch,
    )
    if trainer.is_global_zero:
        summary = {**asdict(result), "monitor": cfg.sweep.monitor}
        (run_dir / METRICS_FILE).write_text(json.dumps(summary, indent=2, default=str))
        write_run_records(cfg, result, loaders)  # splits.csv and MODEL_CARD.md
    log.debug("run %s finished: %s", run_name, json.dumps(result.metrics))
    return result


__all__ = [
    "CHECKPOINT_KEY",
    "ResumeError",
    "RunResult",
    "build_trainer",
    "find_last_checkpoint",
    "run_training",
    "train_and_evaluate",
]
