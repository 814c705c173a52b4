"""``setup_logging_and_callbacks``: turn ``TRAIN_CONFIG`` into loggers and callbacks."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import TYPE_CHECKING, cast

from lightning.pytorch.callbacks import Callback, EarlyStopping, ModelCheckpoint
from lightning.pytorch.loggers import Logger

from skinet.tracking.mlflow_utils import (
    artifact_location_for,
    ensure_experiment,
    resolve_tracking_uri,
)
from skinet.tracking.runs import reopen_run, set_tags
from skinet.tracking.server import check_tracking_server
from skinet.training.callbacks.ema import WeightEMA
from skinet.training.callbacks.epoch_history import EpochMetricsHistory
from skinet.training.callbacks.freeze import FreezeEncoder
from skinet.training.callbacks.mlflow_artifacts import (
    MLflowTrainingArtifactsCallback,
    SkiNetMLFlowLogger,
)
from skinet.training.callbacks.plots import TrainingPlotsCallback
from skinet.training.callbacks.progress_log import (
    EpochProgressBar,
    ProgressLogCallback,
    progress_bar_draws,
)
from skinet.training.callbacks.resizing import ProgressiveResizing
from skinet.training.callbacks.resume import ResumeAwareLearningRateMonitor
from skinet.training.callbacks.stop_check import StopCheck
from skinet.training.callbacks.summary import NetworkSummary
from skinet.training.callbacks.system_metrics import SystemMetricsThreadCallback
from skinet.training.callbacks.throughput import ThroughputCallback

if TYPE_CHECKING:
    from skinet.config.experiment import ExperimentConfig

CHECKPOINT_DIR = "checkpoints"
"""A run's checkpoints: ``<run folder>/checkpoints``."""
LAST_CHECKPOINT_NAME = "last"
"""``checkpoints/last.ckpt``: written after every epoch, read by ``--resume last``."""


def last_checkpoint_path(run_dir: Path) -> Path:
    """``run_dir/checkpoints/last.ckpt``, whether it exists or not."""
    return Path(run_dir) / CHECKPOINT_DIR / f"{LAST_CHECKPOINT_NAME}.ckpt"


def _training_schedule_callbacks(cfg: ExperimentConfig) -> list[Callback]:
    """The callbacks that change how the model trains as the run goes on, where configured."""
    train, resizing, size = cfg.train, cfg.data.progressive_resizing, cfg.data.image_size
    callbacks: list[Callback] = []
    if train.freeze_encoder_epochs:
        callbacks.append(FreezeEncoder(train.freeze_encoder_epochs))
    if resizing is not None:
        callbacks.append(ProgressiveResizing(resizing.side(size), size, resizing.fraction))
    if train.use_ema:  # before the checkpoints: they save the average it keeps
        callbacks.append(WeightEMA(train.ema_config.decay, train.ema_config.start_step))
    return callbacks


def setup_logging_and_callbacks(
    cfg: ExperimentConfig,
    run_dir: Path,
    run_name: str,
    parent_run_id: str | None = None,
    resume_run_id: str | None = None,
    tags: dict[str, str] | None = None,
    history: EpochMetricsHistory | None = None,
) -> tuple[list[Logger], list[Callback]]:
    """Build the loggers and callbacks selected by ``TRAIN_CONFIG``.

    Always: ``EpochMetricsHistory`` (``history``, else a new one), ``SystemMetricsThreadCallback``,
    ``ThroughputCallback``, ``ProgressLogCallback``, ``StopCheck``, ``NetworkSummary`` and
    ``TrainingPlotsCallback`` (PNGs in ``run_dir/plots``, drawn from the history). By flag:
    ``EpochProgressBar`` (``enable_progress_bar``, where it draws), ``EarlyStopping``,
    ``ModelCheckpoint`` (in ``run_dir/checkpoints``; with ``save_last`` a second one writes
    ``last.ckpt`` after every epoch), ``MLFlowLogger`` with ``MLflowTrainingArtifactsCallback``,
    ``LitLogger``, ``WeightEMA``; ``LearningRateMonitor`` whenever a logger is on.

    Args:
        cfg: The resolved experiment config.
        run_dir: This run's output folder.
        run_name: MLflow run name (see :func:`skinet.tracking.mlflow_utils.make_run_name`).
        parent_run_id: MLflow run to nest this run under (a sweep's parent run).
        resume_run_id: An existing MLflow run to continue (resuming from a checkpoint).
        tags: More MLflow tags of the run (a fine-tuned run's lineage).
        history: The run's epoch records (the run reads its best epoch there).

    Raises:
        TrackingError: The MLflow server does not answer (checked before anything runs).
        ImportError: ``use_litlogger_logger`` is on but ``litlogger`` is not installed.
    """
    train = cfg.train
    run_dir = Path(run_dir)
    loggers: list[Logger] = []
    history = history if history is not None else EpochMetricsHistory()
    callbacks: list[Callback] = [
        history,
        SystemMetricsThreadCallback(train.system_metrics_interval_sec),
        ThroughputCallback(),
        ProgressLogCallback(train.progress_log_interval_sec, train.enable_progress_bar),
        StopCheck(),
        NetworkSummary(),
    ]
    if progress_bar_draws(train.enable_progress_bar):
        callbacks.append(EpochProgressBar())
    callbacks += _training_schedule_callbacks(cfg)
    if train.use_early_stopping:
        stop = train.early_stopping_config
        callbacks.append(
            EarlyStopping(
                monitor=stop.monitor or cfg.sweep.monitor,
                mode=stop.mode,
                patience=stop.patience,
                min_delta=stop.min_delta,
            )
        )
    if train.use_checkpoint:
        ckpt = train.checkpoint_config
        last = ckpt.select == "last"  # Lightning's way: the highest epoch is the best
        callbacks.append(
            ModelCheckpoint(
                dirpath=run_dir / CHECKPOINT_DIR,
                monitor="epoch" if last else ckpt.monitor or cfg.sweep.monitor,
                mode="max" if last else ckpt.mode,
                save_top_k=ckpt.save_top_k,
                filename=ckpt.filename,
            )
        )
        if ckpt.save_last:
            # Lightning's save_last=True writes last.ckpt only in an epoch where a checkpoint
            # was saved (the monitor improved); this one saves every epoch, overwriting itself.
            callbacks.append(
                ModelCheckpoint(
                    dirpath=run_dir / CHECKPOINT_DIR,
                    filename=LAST_CHECKPOINT_NAME,
                    monitor=None,
                    save_top_k=1,
                    enable_version_counter=False,
                )
            )
    if train.use_mlflow_logger:
        loggers.append(
            build_mlflow_logger(cfg, run_dir, run_name, parent_run_id, resume_run_id, tags)
        )
        callbacks.append(MLflowTrainingArtifactsCallback(cfg))
    if train.use_litlogger_logger:
        loggers.append(build_litlogger(cfg, run_dir, run_name))
    standard = cfg.data.normalization_mode == "standard"
    callbacks.append(
        TrainingPlotsCallback(
            run_dir / "plots",
            history,
            mean=cfg.data.mean if standard else None,
            std=cfg.data.std if standard else None,
            kept_epoch=train.checkpoint_config.kept_epoch,
        )
    )
    if loggers:
        # A schedule stepped every batch is logged every log_every_n_steps, the rest per epoch.
        interval = "step" if train.budget_schedule else "epoch"
        callbacks.append(ResumeAwareLearningRateMonitor(logging_interval=interval))
    return loggers, callbacks


def build_mlflow_logger(
    cfg: ExperimentConfig,
    run_dir: Path,
    run_name: str,
    parent_run_id: str | None = None,
    resume_run_id: str | None = None,
    extra_tags: dict[str, str] | None = None,
) -> SkiNetMLFlowLogger:
    """An MLflow logger on the resolved store; checks the server and creates the experiment.

    With ``resume_run_id`` the logger continues that run (set back to ``RUNNING``) when it still
    exists in the store, so a resumed training keeps one metric history. The status the run
    had is kept in the tag ``skinet.resumed_from_status``; a run still ``RUNNING`` belonged to
    an attempt that died without closing it and is first closed as ``KILLED``.
    """
    from mlflow.utils.mlflow_tags import MLFLOW_PARENT_RUN_ID  # only with tracking on

    mlflow_cfg = cfg.train.mlflow_config
    uri = resolve_tracking_uri(cfg)
    check_tracking_server(uri)
    experiment_name = mlflow_cfg.experiment_name or cfg.train.experiment_name
    artifact_location = artifact_location_for(cfg, uri)
    ensure_experiment(uri, experiment_name, artifact_location)
    tags = {"skinet.run_dir": str(Path(run_dir).resolve()), "skinet.seed": str(cfg.train.seed)}
    tags.update(extra_tags or {})
    if parent_run_id is not None:
        tags[MLFLOW_PARENT_RUN_ID] = parent_run_id
    previous_status = reopen_run(uri, resume_run_id) if resume_run_id else None
    run_id = resume_run_id if previous_status else None
    if run_id is not None and previous_status is not None:
        set_tags(uri, run_id, {"skinet.resumed_from_status": previous_status})
    return SkiNetMLFlowLogger(
        experiment_name=experiment_name,
        run_name=run_name,
        run_id=run_id,
        tracking_uri=uri,
        tags=tags,
        artifact_location=artifact_location,
        log_model=False,
        # Metric writes go through MLflow's background queue instead of blocking each step.
        synchronous=False,
    )


def build_litlogger(cfg: ExperimentConfig, run_dir: Path, run_name: str) -> Logger:
    """Lightning Studio's ``LitLogger`` from ``TRAIN_CONFIG.litlogger_config``."""
    if importlib.util.find_spec("litlogger") is None:
        raise ImportError(
            "TRAIN_CONFIG.use_litlogger_logger is true but the optional package 'litlogger' is "
            "not installed: run `pip install litlogger` or set use_litlogger_logger: false"
        )
    from lightning.pytorch.loggers import LitLogger

    lit = cfg.train.litlogger_config
    logger = LitLogger(
        root_dir=Path(run_dir) / "litlogger",
        name=lit.name or run_name,
        teamspace=lit.teamspace,
        metadata={"experiment_name": cfg.train.experiment_name, "run_name": run_name},
        log_model=lit.log_model,
    )
    return cast(Logger, logger)
