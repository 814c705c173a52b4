"""MLflow logger and the artifacts logged around ``fit``.

``mlflow`` is imported only where a run is written, so training with the MLflow logger off
works on a machine without MLflow installed.
"""

from __future__ import annotations

import logging
import math
import os
from contextlib import nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import lightning as L
import yaml
from lightning.fabric.utilities.logger import _convert_params, _flatten_dict
from lightning.pytorch.callbacks import Callback, EarlyStopping, ModelCheckpoint
from lightning.pytorch.loggers import MLFlowLogger
from lightning.pytorch.utilities import rank_zero_only

from skinet.runtime.devices import config_with_resolved
from skinet.tracking.mlflow_utils import first_line, quiet_store_errors
from skinet.training.callbacks.summary import summarize_model

if TYPE_CHECKING:
    from skinet.config.experiment import ExperimentConfig

log = logging.getLogger(__name__)

TRACKING_URI_ENV = "MLFLOW_TRACKING_URI"

# MLFlowLogger.log_hyperparams cuts values at 250 characters; cut the same for comparisons.
_MAX_PARAM_LENGTH = 250


class SkiNetMLFlowLogger(MLFlowLogger):
    """``MLFlowLogger`` whose ``FAILED`` status sticks and whose ``finalize`` never hides an error.

    Lightning calls ``finalize("failed")`` when fit raises; a later ``finalize("success")``
    (e.g. from a ``trainer.test`` run after a caught failure) would reopen the run as
    ``FINISHED``. And if the store is unreachable while a failed run is finalised, the store
    error would replace the training error; it is logged as a warning instead.

    While ``keep_open`` is true a successful ``finalize`` only lands the queued metrics: the
    run stays ``RUNNING`` between ``fit`` and ``test`` (Lightning finalizes after each), so a
    run killed before its test is not shown as ``FINISHED``. ``run_training`` closes it.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.failed = False
        self.keep_open = False

    @property
    def opened_run_id(self) -> str | None:
        """The id of the MLflow run this logger has opened or continues (``None``: none yet).

        Unlike ``run_id``, asking does not start a run.
        """
        return cast(str | None, self._run_id)

    @property
    def experiment(self) -> Any:
        # MLFlowLogger calls mlflow.set_tracking_uri, which also exports MLFLOW_TRACKING_URI:
        # the next run in this process (another seed or trial, another output_dir) would then
        # resolve its store to this one. Keep the environment as it was.
        previous = os.environ.get(TRACKING_URI_ENV)
        try:
            return super().experiment
        finally:
            if previous is None:
                os.environ.pop(TRACKING_URI_ENV, None)
            else:
                os.environ[TRACKING_URI_ENV] = previous

    @rank_zero_only
    def log_hyperparams(self, params: Any) -> None:
        """Log the parameters this run does not have yet.

        A resumed run logs its hyperparameters again at fit start; MLflow refuses a changed
        value ("Changing param values is not allowed") and would print that error for every
        setting the resume changed. The run keeps its first values; what changed is recorded as
        ``resume/<n>/<param>`` (:func:`log_params_once`).
        """
        flat = _flatten_dict(_convert_params(params))
        existing = self.experiment.get_run(self.run_id).data.params if self.run_id else {}
        new = {key: value for key, value in flat.items() if key not in existing}
        if new:
            super().log_hyperparams(new)

    @rank_zero_only
    def finalize(self, status: str = "success") -> None:
        if status in ("failed", "FAILED"):
            self.failed = True
        elif self.failed:
            status = "failed"
        try:
            import mlflow

            # Metrics are logged asynchronously (see build_mlflow_logger); land them first.
            with quiet_store_errors() if self.failed else nullcontext():
                mlflow.flush_async_logging()
                if self.keep_open and not self.failed:
                    return
                super().finalize(status)
        except Exception as exc:
            if not self.failed:
                raise
            # run_training marks the run FAILED next (mark_run_failed) and says if it could not.
            log.debug("could not mark MLflow run %s as FAILED: %s", self._run_id, first_line(exc))


class MLflowTrainingArtifactsCallback(Callback):
    """Log what a run needs to be understood and reloaded later to every ``MLFlowLogger``.

    - fit start: the config as parameters (``TRAIN_CONFIG/lr``, ...), what its automatic values
      resolved to on this machine (``RESOLVED/precision``, ``RESOLVED/num_workers``, ...) and, when
      ``mlflow_config.log_model_summary``, ``model_summary.txt``;
    - fit end: ``config/resolved_config.yaml`` (the same two, as in the run's ``config.yaml``),
      ``early_stopping_state.json`` (when ``EarlyStopping`` is on) and, when
      ``mlflow_config.log_checkpoint``, the best checkpoint under ``checkpoints/``.
    """

    def __init__(self, cfg: ExperimentConfig) -> None:
        self.cfg = cfg

    @rank_zero_only
    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        loggers = mlflow_loggers(trainer)
        if not loggers:
            return
        params = flatten_params(config_with_resolved(self.cfg))
        wanted = self.cfg.train.mlflow_config.log_model_summary
        summary = summarize_model(pl_module) if wanted else None
        for logger in loggers:
            log_params_once(logger, params)
            if summary is not None:
                logger.experiment.log_text(logger.run_id, summary, "model_summary.txt")

    @rank_zero_only
    def on_fit_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        loggers = mlflow_loggers(trainer)
        if not loggers:
            return
        config_yaml = yaml.safe_dump(config_with_resolved(self.cfg), sort_keys=False)
        stopping = early_stopping_state(trainer)
        best = best_checkpoint(trainer) if self.cfg.train.mlflow_config.log_checkpoint else None
        for logger in loggers:
            client, run_id = logger.experiment, logger.run_id
            client.log_text(run_id, config_yaml, "config/resolved_config.yaml")
            if stopping is not None:
                client.log_dict(run_id, stopping, "early_stopping_state.json")
            if best is not None:
                log_checkpoint_artifact(client, run_id, best)
                client.set_tag(run_id, "best_checkpoint", best.name)


def log_checkpoint_artifact(client: Any, run_id: str | None, checkpoint: Path) -> None:
    """Copy ``checkpoint`` into the run's ``checkpoints/`` artifacts; a copy that fails (a full
    disk) is removed from a local artifact store instead of being left there incomplete."""
    try:
        client.log_artifact(run_id, str(checkpoint), "checkpoints")
    except OSError:
        uri = client.get_run(run_id).info.artifact_uri
        local = (
            Path(uri.removeprefix("file://"))
            if "://" not in uri or uri.startswith("file://")
            else None
        )
        partial = None if local is None else local / "checkpoints" / checkpoint.name
        if partial is not None and partial.is_file():
            partial.unlink()
            log.warning("removed the incomplete artifact copy %s", partial)
        raise


RESUMES_TAG = "skinet.resumes"
"""How many times a run was resumed; resume ``n`` logs changed values as ``resume/<n>/<param>``."""


def flatten_params(config: dict[str, Any]) -> dict[str, str]:
    """The config as MLflow parameters, named as ``MLFlowLogger.log_hyperparams`` names them."""
    flat = _flatten_dict(_convert_params(config))
    return {key: str(value)[:_MAX_PARAM_LENGTH] for key, value in flat.items()}


def log_params_once(logger: MLFlowLogger, params: dict[str, str]) -> None:
    """Log ``params``; on a run that has them already, record changed values under ``resume/``.

    MLflow refuses a new value for a logged parameter. A resumed run logs the parameters it does
    not have yet, and each changed one as ``resume/<n>/<name>`` (its old value stays under
    ``<name>``), where ``n`` counts the resumes in the tag ``skinet.resumes``.
    """
    client, run_id = logger.experiment, logger.run_id
    run = client.get_run(run_id)
    logged = run.data.params
    new = {key: value for key, value in params.items() if key not in logged}
    if logged:
        resume = int(run.data.tags.get(RESUMES_TAG, "0")) + 1
        changed = {key: value for key, value in params.items() if logged.get(key, value) != value}
        new.update({f"resume/{resume}/{key}": value for key, value in changed.items()})
        client.set_tag(run_id, RESUMES_TAG, str(resume))
        if changed:
            log.info(
                "resumed with changed parameters: %s",
                ", ".join(f"{key} {logged[key]} -> {changed[key]}" for key in sorted(changed)),
            )
    from mlflow.entities import Param

    batch = [Param(key, value) for key, value in new.items()]
    for start in range(0, len(batch), 100):
        client.log_batch(run_id, params=batch[start : start + 100], synchronous=True)


def mlflow_loggers(trainer: L.Trainer) -> list[MLFlowLogger]:
    """The trainer's MLflow loggers."""
    return [logger for logger in trainer.loggers if isinstance(logger, MLFlowLogger)]


@rank_zero_only
def log_artifacts(trainer: L.Trainer, paths: list[Path], folder: str) -> None:
    """Log ``paths`` under ``folder`` to every MLflow logger of the trainer."""
    for logger in mlflow_loggers(trainer):
        for path in paths:
            logger.experiment.log_artifact(logger.run_id, str(path), folder)


def early_stopping_state(trainer: L.Trainer) -> dict[str, Any] | None:
    """The first ``EarlyStopping`` callback's settings and outcome as plain data."""
    callback = next((c for c in trainer.callbacks if isinstance(c, EarlyStopping)), None)  # type: ignore[attr-defined]
    if callback is None:
        return None
    return {
        "monitor": callback.monitor,
        "mode": callback.mode,
        "patience": callback.patience,
        "min_delta": abs(float(callback.min_delta)),
        "best_score": _plain_float(callback.best_score),
        "wait_count": int(callback.wait_count),
        "stopped_epoch": int(callback.stopped_epoch),
        "stopped_early": bool(callback.stopped_epoch > 0),
        "epochs_run": int(trainer.current_epoch),
        "global_step": int(trainer.global_step),
    }


def best_checkpoint(trainer: L.Trainer) -> Path | None:
    """The best checkpoint of the first monitored ``ModelCheckpoint``, if one was written."""
    callback = next(
        (c for c in trainer.callbacks if isinstance(c, ModelCheckpoint) and c.monitor),  # type: ignore[attr-defined]
        None,
    )
    if callback is None or not callback.best_model_path:
        return None
    path = Path(callback.best_model_path)
    return path if path.is_file() else None


def _plain_float(value: Any) -> float | None:
    number = float(value.item() if hasattr(value, "item") else value)
    return number if math.isfinite(number) else None
