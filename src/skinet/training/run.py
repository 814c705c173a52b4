"""``train_and_evaluate``: the one place a ``Trainer`` is built, fitted and tested."""

from __future__ import annotations

import json
import logging
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import lightning as L
import torch
import yaml
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.loggers import MLFlowLogger

from skinet.augment.checks import check_config
from skinet.checkpoints.format import CheckpointPayload
from skinet.config.experiment import RESOLVED_KEY, ExperimentConfig, parse_config
from skinet.runtime.allocator import malloc_tuning, untuned_hint
from skinet.runtime.devices import TrainSettings, config_with_resolved, resolve_train_settings
from skinet.runtime.rank import is_launch_rank_zero
from skinet.tracking.mlflow_utils import make_run_name, mark_run_failed, resolve_tracking_uri
from skinet.tracking.runs import finish_run, set_tags
from skinet.training.callbacks.epoch_history import EpochMetricsHistory
from skinet.training.callbacks.mlflow_artifacts import SkiNetMLFlowLogger
from skinet.training.callbacks.resume import ResumeStateCallback
from skinet.training.callbacks.setup import setup_logging_and_callbacks
from skinet.training.checkpoint_io import WholeFileCheckpointIO
from skinet.training.data.loaders import build_dataloaders
from skinet.training.data.visualize import visualize_augmented_data
from skinet.training.guards import check_output_dir, disk_full_error, out_of_memory_error
from skinet.training.init_from import (
    InitSource,
    load_init_weights,
    read_init_source,
    read_lineage,
    resume_config,
    write_lineage,
)
from skinet.training.lightning_model import LightningModel, check_attention_upsample
from skinet.training.records import CONFIG_FILE, METRICS_FILE, RunResult, write_run_records
from skinet.training.reproducibility import configure_reproducibility
from skinet.training.resume import (
    ResumeError,
    check_resume,
    find_last_checkpoint,
    refusal_message,
    refused_changes,
    remove_empty_checkpoints,
)
from skinet.training.signals import RunInterrupted, stop_on_signals

log = logging.getLogger(__name__)


def write_config_file(path: Path, cfg: ExperimentConfig, settings: TrainSettings) -> None:
    """``config.yaml``: the config as written (automatic values left ``null``), then, under
    ``RESOLVED``, what they resolved to on this machine; read back, ``RESOLVED`` is dropped."""
    written = config_with_resolved(cfg, settings)
    resolved = {RESOLVED_KEY: written.pop(RESOLVED_KEY)}
    path.write_text(
        yaml.safe_dump(written, sort_keys=False)
        + "# Resolved on the machine that ran it; resolved again where it runs next.\n"
        + yaml.safe_dump(resolved, sort_keys=False)
    )


def build_trainer(
    cfg: ExperimentConfig,
    run_dir: Path,
    loggers: list[Any],
    callbacks: list[Any],
    deterministic: bool | str,
) -> L.Trainer:
    """A Lightning ``Trainer`` configured from ``TRAIN_CONFIG``."""
    train_cfg = cfg.train
    settings = resolve_train_settings(train_cfg)
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
        precision=settings.precision,  # type: ignore[arg-type]
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
        plugins=[WholeFileCheckpointIO()],  # a full disk leaves no partial checkpoint
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
        resume: A checkpoint to continue from, or ``"last"`` for the newest ``last.ckpt`` of a
            run of the same ``experiment_name`` under ``TRAIN_CONFIG.output_dir``; weights,
            optimizer, scheduler, epoch, RNG states and the augmentation streams are restored.
            A run whose training ended but whose test did not is tested and completed.
        parent_run_id: MLflow run to nest this run under (sweeps).
        run_name: Overrides ``{experiment_name}_seed{seed}_{timestamp}``.

    Returns:
        The run's outputs; ``metrics`` holds the monitored metric at its best epoch (under its
        own name), the last epoch's other validation metrics and every ``test_*`` metric.
    """
    check_config(cfg, "the training config")  # the CLI checked it; a call from Python may not
    train_cfg = cfg.train
    rank_zero = is_launch_rank_zero()
    if rank_zero:
        check_output_dir(Path(train_cfg.output_dir))
    if rank_zero:
        log.debug("allocator: %s", malloc_tuning())
        if (hint := untuned_hint()) is not None:
            log.info("%s", hint)
    deterministic = configure_reproducibility(cfg)
    # Only rank 0's name counts: the other ranks make no folder and write nothing, and learn
    # rank 0's name once their process group is up (broadcast after fit).
    run_name = (
        run_name
        or train_cfg.mlflow_config.run_name
        or make_run_name(train_cfg.experiment_name, train_cfg.seed)
    )
    run_dir = Path(train_cfg.output_dir) / run_name
    resume_path: Path | None = None
    resume_run_id: str | None = None
    init_source: InitSource | None = None
    if resume is not None:
        resume_path = (
            find_last_checkpoint(train_cfg.output_dir, train_cfg.experiment_name)
            if str(resume) == "last"
            else Path(resume)
        )
        if resume_path.parent.name == "checkpoints":
            run_dir = resume_path.parent.parent
            run_name = run_dir.name
        payload = CheckpointPayload.from_checkpoint(
            check_resume(resume_path, train_cfg.max_epochs, run_dir), str(resume_path)
        )
        source = f"{resume_path} (checkpoint config)"
        saved = parse_config(payload.config, source)
        # A fine-tuned run resumes from its own checkpoint: its source is not read again.
        cfg = resume_config(cfg, saved)
        train_cfg = cfg.train
        check_attention_upsample(payload, cfg)  # before any run or folder is made
        changes = refused_changes(saved, cfg)
        if changes:
            raise ResumeError(refusal_message(str(resume_path), changes))
        resume_run_id = payload.mlflow_run_id
        remove_empty_checkpoints(resume_path.parent)
        lineage = read_lineage(run_dir)
    else:
        cfg, init_source = read_init_source(cfg)
        train_cfg = cfg.train
        lineage = init_source.lineage if init_source is not None else None

    # Bad data, a model too large for the memory and an unreachable tracking server all fail
    # before any run folder or MLflow run is made, so a failed start leaves nothing half-made.
    settings = resolve_train_settings(train_cfg)
    loaders = build_dataloaders(cfg, world_size=settings.world_size)
    try:
        model = LightningModel(cfg.to_yaml_dict(), resolved=settings.as_dict())
    except RuntimeError as error:
        oom = out_of_memory_error(error, cfg, "building the model")
        if oom is None:
            raise
        raise oom from error
    loggers, callbacks = setup_logging_and_callbacks(
        cfg, run_dir, run_name, parent_run_id, resume_run_id, lineage.tags() if lineage else None
    )
    if rank_zero:
        run_dir.mkdir(parents=True, exist_ok=True)
        write_config_file(run_dir / CONFIG_FILE, cfg, settings)
        if init_source is not None:
            write_lineage(run_dir, init_source.lineage)

    if visualize and rank_zero:
        visualize_augmented_data(loaders.train_dataset, run_dir / "augmented_samples.png")

    history = EpochMetricsHistory()
    callbacks.append(history)
    if init_source is not None:  # a resumed run has its own weights
        load_init_weights(model.model, init_source.state_dict, init_source.lineage.checkpoint)
    callbacks.append(ResumeStateCallback(cfg, loaders.train_dataset))
    held_open = [lg for lg in loggers if isinstance(lg, SkiNetMLFlowLogger)]
    for logger in held_open:
        logger.keep_open = True  # FINISHED only once the test and metrics.json are done
    trainer = build_trainer(cfg, run_dir, loggers, callbacks, deterministic)

    started = time.perf_counter()
    try:
        with stop_on_signals():
            trainer.fit(model, loaders.train, loaders.val, ckpt_path=resume_path)
            checkpoint = next(
                (c for c in callbacks if isinstance(c, ModelCheckpoint) and c.monitor), None
            )
            best_path = checkpoint.best_model_path if checkpoint is not None else ""
            fit_metrics = best_epoch_metrics(trainer, history, best_path)
            test_metrics: dict[str, float] = {}
            if loaders.test is not None:
                results = trainer.test(
                    model, loaders.test, ckpt_path=best_path or None, verbose=False
                )
                test_metrics = {k: float(v) for k, v in (results[0] if results else {}).items()}
            mlflow_run_id = next(
                (lg.run_id for lg in loggers if isinstance(lg, MLFlowLogger)), None
            )
            run_name, run_dir, mlflow_run_id = trainer.strategy.broadcast(
                (run_name, run_dir, mlflow_run_id)
            )
            result = RunResult(
                metrics={**fit_metrics, **test_metrics},
                run_name=run_name,
                run_dir=run_dir.resolve(),
                best_checkpoint=Path(best_path).resolve() if best_path else None,
                mlflow_run_id=mlflow_run_id,
                fit_seconds=round(time.perf_counter() - started, 2),
                epochs_trained=trainer.current_epoch,
            )
            if trainer.is_global_zero:
                summary = {**asdict(result), "monitor": cfg.sweep.monitor}
                (run_dir / METRICS_FILE).write_text(json.dumps(summary, indent=2, default=str))
                # splits.csv and MODEL_CARD.md
                write_run_records(cfg, result, loaders, lineage.as_card() if lineage else None)
            for logger in held_open:
                logger.keep_open = False
                logger.finalize("success")
    except BaseException as error:
        marked = _record_stop(cfg, loggers, error)
        oom = (
            out_of_memory_error(error, cfg, "training") if isinstance(error, RuntimeError) else None
        )
        known = oom or disk_full_error(error, run_dir, marked)
        if known is None:
            raise
        raise known from error
    log.debug("run %s finished: %s", run_name, json.dumps(result.metrics))
    return result


def best_epoch_metrics(
    trainer: L.Trainer, history: EpochMetricsHistory, best_path: str
) -> dict[str, float]:
    """The last epoch's metrics with the best checkpoint's own ``val_*`` and ``best_epoch``.

    The validation metrics, the validation-optimal threshold among them, are those of the
    epoch the best checkpoint was saved at (0-based ``best_epoch``); the ``train_*`` figures
    stay the last epoch's. Without a best checkpoint (checkpointing off), or for an epoch the
    history does not hold, the last epoch's metrics, with ``best_epoch`` absent.
    """
    last = {k: float(v) for k, v in trainer.callback_metrics.items()}
    if not best_path:
        return last
    epoch = int(torch.load(best_path, map_location="cpu", weights_only=True)["epoch"])
    if epoch not in history.history:
        log.warning("no recorded metrics for the best epoch %d; reporting the last epoch's", epoch)
        return last
    rest = {k: v for k, v in last.items() if not k.startswith("val_")}
    return {**rest, **history.history[epoch], "best_epoch": float(epoch)}


def _record_stop(cfg: ExperimentConfig, loggers: list[Any], error: BaseException) -> bool | None:
    """Close the MLflow run: ``KILLED`` for SIGINT/SIGTERM, else ``FAILED`` with the error.

    Whether every failed MLflow run is marked ``FAILED`` (``None``: no MLflow run).
    """
    uri = resolve_tracking_uri(cfg)
    marked: bool | None = None
    for logger in loggers:
        if not (isinstance(logger, MLFlowLogger) and logger.run_id):
            continue
        if not isinstance(error, RunInterrupted):
            marked = mark_run_failed(logger.run_id, uri, error) and marked is not False
            continue
        try:
            set_tags(uri, logger.run_id, {"skinet.stopped_by": str(error)})
            finish_run(uri, logger.run_id, "KILLED")
        except Exception as exc:  # noqa: BLE001 - the interruption must stay visible
            log.warning("could not mark MLflow run %s as KILLED: %s", logger.run_id, exc)
    return marked
