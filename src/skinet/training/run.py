"""``train_and_evaluate``: the one place a ``Trainer`` is built, fitted and tested."""

from __future__ import annotations

import json
import logging
import os
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import lightning as L
import torch
import yaml
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.loggers import MLFlowLogger

from skinet.checkpoints.format import CheckpointError, CheckpointPayload
from skinet.checkpoints.read import read_checkpoint_file
from skinet.config.experiment import RESOLVED_KEY, ExperimentConfig, parse_config
from skinet.runtime.allocator import malloc_tuning, untuned_hint
from skinet.runtime.devices import TrainSettings, resolve_train_settings
from skinet.runtime.rank import is_launch_rank_zero
from skinet.tracking.mlflow_utils import make_run_name, mark_run_failed, resolve_tracking_uri
from skinet.tracking.runs import finish_run, set_tags
from skinet.training.callbacks.epoch_history import EpochMetricsHistory
from skinet.training.callbacks.mlflow_artifacts import SkiNetMLFlowLogger
from skinet.training.callbacks.resume import ResumeStateCallback
from skinet.training.callbacks.setup import setup_logging_and_callbacks
from skinet.training.data.loaders import build_dataloaders
from skinet.training.data.visualize import visualize_augmented_data
from skinet.training.init_from import load_init_weights, read_init_source
from skinet.training.lightning_model import LightningModel, check_attention_upsample
from skinet.training.records import RunResult, write_run_records
from skinet.training.reproducibility import configure_reproducibility
from skinet.training.resume_changes import refusal_message, refused_changes
from skinet.training.signals import RunInterrupted, stop_on_signals

log = logging.getLogger(__name__)

CONFIG_FILE = "config.yaml"
METRICS_FILE = "metrics.json"


class ResumeError(ValueError):
    """A checkpoint to resume from is missing, unreadable or already past ``max_epochs``."""


def find_last_checkpoint(output_dir: str | Path, experiment_name: str | None = None) -> Path:
    """The newest ``checkpoints/last.ckpt`` among the run folders in ``output_dir``.

    Args:
        output_dir: Folder holding the run folders.
        experiment_name: Only consider runs whose ``config.yaml`` has this
            ``TRAIN_CONFIG.experiment_name`` (``None``: every run).
    """
    candidates = sorted(
        (
            path
            for path in Path(output_dir).glob("*/checkpoints/last*.ckpt")
            if experiment_name is None or _experiment_of(path.parent.parent) == experiment_name
        ),
        key=lambda p: p.stat().st_mtime,
    )
    if not candidates:
        of = f" of experiment {experiment_name!r}" if experiment_name is not None else ""
        raise ResumeError(
            f"--resume last: no checkpoints/last.ckpt{of} under "
            f"{Path(output_dir).resolve()}; pass the checkpoint path instead"
        )
    return candidates[-1]


def _experiment_of(run_dir: Path) -> str | None:
    """``TRAIN_CONFIG.experiment_name`` in a run folder's ``config.yaml`` (``None``: unreadable)."""
    try:
        saved = yaml.safe_load((run_dir / CONFIG_FILE).read_text())
        return str(saved["TRAIN_CONFIG"]["experiment_name"])
    except (OSError, yaml.YAMLError, KeyError, TypeError):
        return None


def _check_resume(checkpoint_path: Path, max_epochs: int, run_dir: Path) -> dict[str, Any]:
    """The checkpoint's contents, or a ResumeError when it is unreadable or its run is complete.

    A checkpoint whose training already reached ``max_epochs`` is accepted while its run has no
    ``metrics.json`` (killed between the last epoch and the end of the test): resuming it runs
    the test and completes the run.
    """
    if not checkpoint_path.is_file():
        raise ResumeError(f"checkpoint to resume from not found: {checkpoint_path}")
    try:
        checkpoint = read_checkpoint_file(checkpoint_path)
    except CheckpointError as error:
        others = sorted(
            p for p in checkpoint_path.parent.glob("*.ckpt") if p.name != checkpoint_path.name
        )
        hint = f" Checkpoints beside it: {', '.join(p.name for p in others)}." if others else ""
        raise ResumeError(f"--resume: {error}{hint}") from None
    done = int(checkpoint.get("epoch", -1)) + 1
    if done >= max_epochs:
        if not (run_dir / METRICS_FILE).is_file():
            log.info(
                "training of %s already ended after %d epoch(s); testing its best checkpoint "
                "to finish the run",
                run_dir.name,
                done,
            )
            return checkpoint
        raise ResumeError(
            f"{checkpoint_path} has already trained {done} epoch(s) and TRAIN_CONFIG.max_epochs is "
            f"{max_epochs}: nothing left to train. Set TRAIN_CONFIG.max_epochs above {done} "
            f"(e.g. --set TRAIN_CONFIG.max_epochs={done + 10}) to continue."
        )
    log.info("resuming run %s from %s (%d epoch(s) done)", run_dir.name, checkpoint_path, done)
    return checkpoint


def check_output_dir(output_dir: Path) -> None:
    """Say why ``TRAIN_CONFIG.output_dir`` cannot hold runs, before anything starts.

    The folder itself, or the nearest existing folder above it, is probed with a temporary
    folder that is removed at once: nothing is left behind.

    Raises:
        ValueError: It is a file, or it cannot be created or written to.
    """
    where = f"TRAIN_CONFIG.output_dir {output_dir}"
    existing = output_dir
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        what = "is a file" if existing == output_dir else f"is inside the file {existing}"
        raise ValueError(f"{where} {what}, not a folder: give a folder for the run folders")
    try:
        os.rmdir(tempfile.mkdtemp(dir=existing, prefix=".skinet-write-check-"))
    except OSError as error:
        reason = error.strerror or type(error).__name__
        raise ValueError(
            f"{where} cannot be written to ({reason}): give a folder you can write to, e.g. "
            "--set TRAIN_CONFIG.output_dir=runs"
        ) from None


def write_config_file(path: Path, cfg: ExperimentConfig, settings: TrainSettings) -> None:
    """``config.yaml``: the config as written (automatic values left ``null``), then, under
    ``RESOLVED``, what they resolved to on this machine; read back, ``RESOLVED`` is dropped."""
    text = yaml.safe_dump(cfg.to_yaml_dict(), sort_keys=False)
    resolved = yaml.safe_dump({RESOLVED_KEY: settings.as_dict()}, sort_keys=False)
    path.write_text(
        f"{text}# Resolved on the machine that ran it; resolved again where it runs next.\n"
        f"{resolved}"
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
    cfg, init_source = read_init_source(cfg)
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
            _check_resume(resume_path, train_cfg.max_epochs, run_dir), str(resume_path)
        )
        check_attention_upsample(payload, cfg)  # before any run or folder is made
        source = f"{resume_path} (checkpoint config)"
        saved = parse_config(payload.config, source)
        changes = refused_changes(saved, cfg)
        if changes:
            raise ResumeError(refusal_message(str(resume_path), changes))
        resume_run_id = payload.mlflow_run_id

    # Bad data, a model too large for the memory and an unreachable tracking server all fail
    # before any run folder or MLflow run is made, so a failed start leaves nothing half-made.
    settings = resolve_train_settings(train_cfg)
    loaders = build_dataloaders(cfg, world_size=settings.world_size)
    try:
        model = LightningModel(cfg.to_yaml_dict(), resolved=settings.as_dict())
    except RuntimeError as error:
        oom = _out_of_memory(error, cfg, "building the model")
        if oom is None:
            raise
        raise oom from error
    lineage = init_source.lineage if init_source is not None else None
    loggers, callbacks = setup_logging_and_callbacks(
        cfg, run_dir, run_name, parent_run_id, resume_run_id, lineage.tags() if lineage else None
    )
    if rank_zero:
        run_dir.mkdir(parents=True, exist_ok=True)
        write_config_file(run_dir / CONFIG_FILE, cfg, settings)

    if visualize and rank_zero:
        visualize_augmented_data(loaders.train_dataset, run_dir / "augmented_samples.png")

    history = EpochMetricsHistory()
    callbacks.append(history)
    if init_source is not None and resume_path is None:  # a resumed run has its own weights
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
        _record_stop(cfg, loggers, error)
        oom = _out_of_memory(error, cfg, "training") if isinstance(error, RuntimeError) else None
        if oom is None:
            raise
        raise oom from error
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


class OutOfMemoryError(ValueError):
    """The run ran out of memory; the message says which settings to lower."""


def _out_of_memory(
    error: RuntimeError, cfg: ExperimentConfig, doing: str
) -> OutOfMemoryError | None:
    """An :class:`OutOfMemoryError` saying what to lower for an out-of-memory ``error``
    (``None`` for any other error)."""
    text = str(error)
    if not (
        isinstance(error, torch.OutOfMemoryError)
        or "out of memory" in text
        or "can't allocate memory" in text
    ):
        return None
    first = next((line.strip() for line in text.splitlines() if "memory" in line), text)
    train, data, model = cfg.train, cfg.data, cfg.model
    return OutOfMemoryError(
        f"out of memory while {doing} ({first[:200]}). Lower what the run holds at once: "
        f"TRAIN_CONFIG.batch_size (now {train.batch_size}), DATA_CONFIG.image_size (now "
        f"{data.image_size}), MODEL_CONFIG.out_channels_layer1 (now "
        f"{model.out_channels_layer1}) or number_of_layers (now {model.number_of_layers}); on "
        "a GPU, TRAIN_CONFIG.precision: 16-mixed halves the activations"
    )


def _record_stop(cfg: ExperimentConfig, loggers: list[Any], error: BaseException) -> None:
    """Close the MLflow run: ``KILLED`` for SIGINT/SIGTERM, else ``FAILED`` with the error."""
    uri = resolve_tracking_uri(cfg)
    for logger in loggers:
        if not (isinstance(logger, MLFlowLogger) and logger.run_id):
            continue
        if not isinstance(error, RunInterrupted):
            mark_run_failed(logger.run_id, uri, error)
            continue
        try:
            set_tags(uri, logger.run_id, {"skinet.stopped_by": str(error)})
            finish_run(uri, logger.run_id, "KILLED")
        except Exception as exc:  # noqa: BLE001 - the interruption must stay visible
            log.warning("could not mark MLflow run %s as KILLED: %s", logger.run_id, exc)
