"""``run_training``: the one place a ``Trainer`` is built, fitted and tested.

A run is its steps, each worked out once: the config checked, the plan (folder, name, resume or
fine-tuning source, :func:`skinet.training.plan.plan_run`), the settings resolved on this
machine (passed to the loaders, the model and the ``Trainer``), then fit and test.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path
from typing import Any

import lightning as L
import yaml
from lightning.pytorch.callbacks.early_stopping import EarlyStoppingReason
from lightning.pytorch.loggers import Logger, MLFlowLogger

from skinet.augment.checks import check_config
from skinet.config.experiment import RESOLVED_KEY, ExperimentConfig
from skinet.runtime.allocator import malloc_tuning, untuned_hint
from skinet.runtime.devices import (
    TrainSettings,
    config_with_resolved,
    precision_hint,
    resolve_train_settings,
)
from skinet.runtime.rank import is_launch_rank_zero, own_process_group
from skinet.tracking.mlflow_utils import mark_run_failed, resolve_tracking_uri
from skinet.tracking.runs import finish_run, set_tags
from skinet.training.callbacks.epoch_history import EpochMetricsHistory
from skinet.training.callbacks.mlflow_artifacts import SkiNetMLFlowLogger, best_checkpoint
from skinet.training.callbacks.progress_log import progress_bar_draws
from skinet.training.callbacks.resume import ResumeStateCallback
from skinet.training.callbacks.setup import last_checkpoint_path, setup_logging_and_callbacks
from skinet.training.checkpoint_io import WholeFileCheckpointIO
from skinet.training.data.loaders import DataLoaders, build_dataloaders
from skinet.training.data.visualize import visualize_augmented_data
from skinet.training.guards import check_output_dir, disk_full_error, out_of_memory_error
from skinet.training.init_from import load_init_weights, write_lineage
from skinet.training.lightning_model import LightningModel
from skinet.training.plan import RunPlan, plan_run
from skinet.training.records import (
    CONFIG_FILE,
    METRICS_FILE,
    RunResult,
    StopReason,
    write_run_records,
)
from skinet.training.reproducibility import configure_reproducibility
from skinet.training.schedules import budget_spent
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
    settings: TrainSettings,
    run_dir: Path,
    loggers: list[Any],
    callbacks: list[Any],
    deterministic: bool | str,
    steps_per_epoch: int | None = None,
) -> L.Trainer:
    """A Lightning ``Trainer`` configured from ``TRAIN_CONFIG`` and what it resolved to here.

    ``TRAIN_CONFIG.log_every_n_steps`` is capped at ``steps_per_epoch`` (the training batches of
    one epoch, when known), so a run on a few images logs its steps every epoch, and Lightning
    does not warn that it would not.
    """
    train_cfg = cfg.train
    log_every = train_cfg.log_every_n_steps
    if steps_per_epoch:
        log_every = min(log_every, steps_per_epoch)
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
        log_every_n_steps=log_every,
        num_sanity_val_steps=train_cfg.num_sanity_val_steps,
        accumulate_grad_batches=train_cfg.accumulate_grad_batches,
        enable_checkpointing=train_cfg.use_checkpoint,
        enable_model_summary=False,  # the callbacks hold SkiNet's NetworkSummary instead
        enable_progress_bar=progress_bar_draws(train_cfg.enable_progress_bar),
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
    *,
    checked: bool = False,
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
        checked: ``cfg`` already passed :func:`skinet.augment.checks.check_config` (the CLI).

    Returns:
        The run's outputs; ``metrics`` holds the monitored metric at its best epoch (under its
        own name), the last epoch's other validation metrics and every ``test_*`` metric.
    """
    if not checked:
        check_config(cfg, "the training config")
    check_machine(cfg)
    deterministic = configure_reproducibility(cfg)
    plan = plan_run(cfg, resume, run_name)
    cfg = plan.cfg
    # Bad data, a model too large for the memory and an unreachable tracking server all fail
    # before any run folder or MLflow run is made, so a failed start leaves nothing half-made.
    settings = resolve_train_settings(cfg.train)
    if is_launch_rank_zero() and (hint := precision_hint(settings)) is not None:
        log.warning("%s", hint)
    loaders = build_dataloaders(cfg, settings)
    model = build_model(cfg, settings)
    history = EpochMetricsHistory()
    tags = plan.lineage.tags() if plan.lineage else None
    # From here a stop is recorded: a resumed run's MLflow run is reopened by its logger, and
    # the run folder is written before fit starts.
    loggers: list[Logger] = []
    with own_process_group(), recording_stops(cfg, plan, loggers):
        made, callbacks = setup_logging_and_callbacks(
            cfg, plan.run_dir, plan.run_name, parent_run_id, plan.mlflow_run_id, tags, history
        )
        loggers.extend(made)
        write_run_start(cfg, plan, settings, loaders, visualize)
        if plan.init_source is not None:  # a resumed run has its own weights
            load_init_weights(
                model.model, plan.init_source.state_dict, plan.init_source.lineage.checkpoint
            )
        callbacks.append(ResumeStateCallback(cfg, loaders.train_dataset))
        trainer = build_trainer(
            cfg, settings, plan.run_dir, loggers, callbacks, deterministic, _batches(loaders.train)
        )
        return fit_and_test(cfg, plan, trainer, model, loaders, history)


def _batches(loader: Any) -> int | None:
    """The batches of one pass over ``loader`` (``None`` when it has no length)."""
    try:
        return len(loader)
    except TypeError:
        return None


def check_machine(cfg: ExperimentConfig) -> None:
    """On rank 0: the output folder can hold runs; the allocator's tuning is logged."""
    if not is_launch_rank_zero():
        return
    check_output_dir(Path(cfg.train.output_dir))
    log.debug("allocator: %s", malloc_tuning())
    if (hint := untuned_hint()) is not None:
        log.info("%s", hint)


def build_model(cfg: ExperimentConfig, settings: TrainSettings) -> LightningModel:
    """The LightningModel; running out of memory says what to lower."""
    try:
        return LightningModel(cfg.to_yaml_dict(), resolved=settings.as_dict())
    except RuntimeError as error:
        oom = out_of_memory_error(error, cfg, "building the model")
        if oom is None:
            raise
        raise oom from error


def write_run_start(
    cfg: ExperimentConfig,
    plan: RunPlan,
    settings: TrainSettings,
    loaders: DataLoaders,
    visualize: bool,
) -> None:
    """On rank 0: the run folder with its ``config.yaml``, lineage and augmented samples."""
    if not is_launch_rank_zero():
        return
    plan.run_dir.mkdir(parents=True, exist_ok=True)
    write_config_file(plan.run_dir / CONFIG_FILE, cfg, settings)
    if plan.init_source is not None:
        write_lineage(plan.run_dir, plan.init_source.lineage)
    if visualize:
        visualize_augmented_data(loaders.train_dataset, plan.run_dir / "augmented_samples.png")


@contextmanager
def recording_stops(cfg: ExperimentConfig, plan: RunPlan, loggers: list[Logger]) -> Iterator[None]:
    """Turn SIGINT and SIGTERM into :class:`RunInterrupted` and record how the run stopped.

    A stop (a signal, an error) closes the MLflow runs ``loggers`` hold as ``KILLED`` or
    ``FAILED``; running out of memory or disk is re-raised as an error that says what to do.
    A :class:`RunInterrupted` carries the run's ``last.ckpt`` (``None``: no epoch had
    finished) and whether an MLflow run was closed as ``KILLED``.
    """
    try:
        with stop_on_signals():
            yield
    except BaseException as error:
        if isinstance(error, RunInterrupted):
            last = last_checkpoint_path(plan.run_dir)
            error.last_checkpoint = last if last.is_file() else None
        marked = _record_stop(cfg, loggers, error)
        oom = (
            out_of_memory_error(error, cfg, "training") if isinstance(error, RuntimeError) else None
        )
        known = oom or disk_full_error(error, plan.run_dir, marked)
        if known is None:
            raise
        raise known from error


def fit_and_test(
    cfg: ExperimentConfig,
    plan: RunPlan,
    trainer: L.Trainer,
    model: LightningModel,
    loaders: DataLoaders,
    history: EpochMetricsHistory,
) -> RunResult:
    """Fit, test the best checkpoint, write ``metrics.json`` and the records, close the run.

    Run inside :func:`recording_stops`, which closes the MLflow run of a stopped fit.
    """
    loggers = trainer.loggers
    held_open = [lg for lg in loggers if isinstance(lg, SkiNetMLFlowLogger)]
    for logger in held_open:
        logger.keep_open = True  # FINISHED only once the test and metrics.json are done
    started = time.perf_counter()
    trainer.fit(model, loaders.train, loaders.val, ckpt_path=plan.resume_from)
    # Before the test: it loads the best checkpoint's callback states, and early stopping's of
    # an epoch before the stop says it has not stopped.
    stopped_by = stop_reason(trainer)
    # The best checkpoint is read once, by the history (its epoch, its weights).
    best = history.best_checkpoint(trainer)
    best_path = best.path if best is not None else best_checkpoint(trainer)
    fit_metrics = best_epoch_metrics(trainer, history)
    test_metrics: dict[str, float] = {}
    if loaders.test is not None:
        results = trainer.test(model, loaders.test, ckpt_path=best_path, verbose=False)
        test_metrics = {k: float(v) for k, v in (results[0] if results else {}).items()}
    mlflow_run_id = next((lg.run_id for lg in loggers if isinstance(lg, MLFlowLogger)), None)
    run_name, run_dir, mlflow_run_id = trainer.strategy.broadcast(
        (plan.run_name, plan.run_dir, mlflow_run_id)
    )
    result = RunResult(
        metrics={**fit_metrics, **test_metrics},
        run_name=run_name,
        run_dir=run_dir.resolve(),
        best_checkpoint=best_path.resolve() if best_path else None,
        mlflow_run_id=mlflow_run_id,
        fit_seconds=round(time.perf_counter() - started, 2),
        epochs_trained=trainer.current_epoch,
        stopped_by=stopped_by,
    )
    if trainer.is_global_zero:
        summary = {**asdict(result), "monitor": cfg.sweep.monitor}
        (run_dir / METRICS_FILE).write_text(json.dumps(summary, indent=2, default=str))
        lineage = plan.lineage.as_card() if plan.lineage else None
        # splits.csv and MODEL_CARD.md
        write_run_records(cfg, result, loaders, lineage, precision=str(trainer.precision))
        if mlflow_run_id is not None:
            uri = resolve_tracking_uri(cfg)
            set_tags(uri, mlflow_run_id, {"skinet.stopped_by": result.stopped_by})
    for logger in held_open:
        logger.keep_open = False
        logger.finalize("success")
    log.debug("run %s finished: %s", run_name, json.dumps(result.metrics))
    return result


def best_epoch_metrics(trainer: L.Trainer, history: EpochMetricsHistory) -> dict[str, float]:
    """The last epoch's metrics with the best checkpoint's own ``val_*`` and ``best_epoch``.

    The validation metrics, the validation-optimal threshold among them, are those of the
    epoch the best checkpoint was saved at (0-based ``best_epoch``); the ``train_*`` figures
    stay the last epoch's (from the history when this fit trained none). Without a best
    checkpoint (checkpointing off), or for an epoch the history does not hold, the last epoch's
    metrics, with ``best_epoch`` absent.
    """
    # A resume that trains no epoch (its run was killed before the test) has no train_* of its
    # own: the last recorded epoch's stand in.
    recorded = history.train[max(history.train)] if history.train else {}
    last = {**recorded, **{k: float(v) for k, v in trainer.callback_metrics.items()}}
    best = history.best_checkpoint(trainer)
    if best is None:
        return last
    if best.epoch not in history.history:
        log.warning(
            "no recorded metrics for the kept epoch %d; reporting the last epoch's", best.epoch
        )
        return last
    rest = {k: v for k, v in last.items() if not k.startswith("val_")}
    return {**rest, **history.history[best.epoch], "best_epoch": float(best.epoch)}


def stop_reason(trainer: L.Trainer) -> StopReason:
    """Why ``trainer.fit`` ended.

    The budget comes first: a run whose time ran out may have reached its epochs or its
    patience at the same moment. Early stopping is its own record (``stopping_reason``).
    """
    if budget_spent(trainer):
        return "max_time"
    stopper = trainer.early_stopping_callback
    if stopper is not None and stopper.stopping_reason != EarlyStoppingReason.NOT_STOPPED:
        return "early_stopping"
    if trainer.max_epochs is not None and trainer.current_epoch >= trainer.max_epochs:
        return "max_epochs"
    return "other"


def _record_stop(cfg: ExperimentConfig, loggers: list[Any], error: BaseException) -> bool | None:
    """Close the MLflow run: ``KILLED`` for SIGINT/SIGTERM, else ``FAILED`` with the error.

    Whether every failed MLflow run is marked ``FAILED`` (``None``: no MLflow run).
    """
    uri = resolve_tracking_uri(cfg)
    marked: bool | None = None
    for logger in loggers:
        # A logger opens its MLflow run when fit starts (a resumed run's, when it is built):
        # a stop before that has no run to close, and asking for its id would open one.
        run_id = logger.opened_run_id if isinstance(logger, SkiNetMLFlowLogger) else None
        if run_id is None:
            continue
        if not isinstance(error, RunInterrupted):
            marked = mark_run_failed(run_id, uri, error) and marked is not False
            continue
        try:
            set_tags(uri, run_id, {"skinet.stopped_by": str(error)})
            finish_run(uri, run_id, "KILLED")
            error.mlflow_killed = True
        except Exception as exc:  # noqa: BLE001 - the interruption must stay visible
            log.warning("could not mark MLflow run %s as KILLED: %s", run_id, exc)
    return marked
