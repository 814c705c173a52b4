"""setup_logging_and_callbacks end to end: real Trainer, real MLflow store or server."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
import yaml
from lightning.pytorch.callbacks import EarlyStopping, LearningRateMonitor, ModelCheckpoint
from mlflow.tracking import MlflowClient

from skinet.tracking.mlflow_utils import (
    TrackingError,
    make_run_name,
    mark_run_failed,
    resolve_tracking_uri,
)
from skinet.tracking.server import LocalServer, find_free_port, start_local_server
from skinet.training.callbacks.epoch_history import EpochMetricsHistory
from skinet.training.callbacks.mlflow_artifacts import (
    MLflowTrainingArtifactsCallback,
    SkiNetMLFlowLogger,
)
from skinet.training.callbacks.plots import TrainingPlotsCallback
from skinet.training.callbacks.progress_log import ProgressLogCallback
from skinet.training.callbacks.resume import ResumeAwareLearningRateMonitor
from skinet.training.callbacks.setup import setup_logging_and_callbacks
from skinet.training.callbacks.stop_check import StopCheck
from skinet.training.callbacks.summary import NetworkSummary
from skinet.training.callbacks.system_metrics import SystemMetricsThreadCallback
from skinet.training.callbacks.throughput import ThroughputCallback

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
PLOTS = {"plots/learning_curves.png", "plots/dice_vs_threshold.png", "plots/val_predictions.png"}


@pytest.fixture(autouse=True)
def _isolated_cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Fail if anything writes ./mlruns, and never pick up a user's tracking server.
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)


@pytest.fixture
def server(tmp_path: Path, copy_mlflow_db: Any) -> Iterator[LocalServer]:
    uri = copy_mlflow_db(tmp_path / "server" / "mlflow.db")
    with start_local_server(uri, tmp_path / "server" / "artifacts") as server:
        assert os.getpgid(server.process.pid) == server.process.pid  # its own process group
        yield server
    # The whole group is gone: uvicorn workers must not outlive the server.
    assert server.process.poll() is not None
    group = [
        p
        for p in psutil.process_iter(["status"])
        if _pgid(p.pid) == server.process.pid and p.info["status"] != psutil.STATUS_ZOMBIE
    ]
    assert group == []


def _pgid(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except OSError:
        return None


@pytest.fixture
def shared_store(tmp_path: Path, copy_mlflow_db: Any) -> dict[str, Any]:
    """``mlflow_config`` of an explicit, already initialised SQLite store."""
    return {"tracking_uri": copy_mlflow_db(tmp_path / "store" / "mlflow.db")}


def all_artifacts(client: MlflowClient, run_id: str, path: str | None = None) -> set[str]:
    found: set[str] = set()
    for item in client.list_artifacts(run_id, path):
        found |= all_artifacts(client, run_id, item.path) if item.is_dir else {item.path}
    return found


def fit_with_setup(
    cfg: Any,
    tmp_path: Path,
    model: Any,
    loaders: Any,
    trainer_factory: Any,
    parent_run_id: str | None = None,
) -> tuple[Any, SkiNetMLFlowLogger]:
    run_name = make_run_name(cfg.train.experiment_name, cfg.train.seed)
    loggers, callbacks = setup_logging_and_callbacks(
        cfg, tmp_path / "runs" / run_name, run_name, parent_run_id=parent_run_id
    )
    trainer = trainer_factory(loggers, callbacks)
    trainer.fit(model, *loaders)
    (logger,) = loggers
    assert isinstance(logger, SkiNetMLFlowLogger)
    return trainer, logger


def check_finished_run(
    client: MlflowClient, logger: SkiNetMLFlowLogger, cfg: Any, tmp_path: Path
) -> None:
    run = client.get_run(logger.run_id)
    assert run.info.status == "FINISHED"
    assert run.info.run_name.startswith("tiny_seed42_")
    params = run.data.params
    assert params["TRAIN_CONFIG/lr"] == str(cfg.train.lr)
    assert params["SWEEP_CONFIG/monitor"] == "val_best_dice_at_threshold"
    assert params["lr"] == "0.05"  # the module's own hparams, logged by Lightning

    steps = len(client.get_metric_history(logger.run_id, "perf/samples_per_sec"))
    assert steps == 4  # 2 epochs x 2 batches, log_every_n_steps=1
    assert len(client.get_metric_history(logger.run_id, "perf/time_per_step_ms")) == 4
    lr_keys = [k for k in run.data.metrics if k.startswith("lr-")]
    assert lr_keys and client.get_metric_history(logger.run_id, lr_keys[0])[0].value == 0.05
    assert len(client.get_metric_history(logger.run_id, "val_best_dice_at_threshold")) == 2
    assert {"train_loss", "val_loss", "val_dice", "system/cpu_percent"} <= set(run.data.metrics)

    artifacts = all_artifacts(client, logger.run_id)
    assert artifacts >= PLOTS
    assert {
        "model_summary.txt",
        "early_stopping_state.json",
        "config/resolved_config.yaml",
    } <= artifacts
    (best,) = [a for a in artifacts if a.startswith("checkpoints/best-")]
    assert run.data.tags["best_checkpoint"] == best.removeprefix("checkpoints/")

    local = Path(client.download_artifacts(logger.run_id, "plots", str(tmp_path / "dl")))
    for png in local.iterdir():
        assert png.read_bytes()[:8] == PNG_MAGIC
    config_file = client.download_artifacts(
        logger.run_id, "config/resolved_config.yaml", str(tmp_path / "dl")
    )
    saved = yaml.safe_load(Path(config_file).read_text())
    assert saved.pop("RESOLVED")["precision"] == "32-true"  # resolved here, kept apart
    assert saved == cfg.to_yaml_dict()
    state_file = client.download_artifacts(
        logger.run_id, "early_stopping_state.json", str(tmp_path / "dl")
    )
    assert '"monitor": "val_best_dice_at_threshold"' in Path(state_file).read_text()


def test_embedded_sqlite_store(
    tmp_path: Path,
    config_factory: Any,
    seg_model_cls: Any,
    loaders: Any,
    trainer_factory: Any,
    copy_mlflow_db: Any,
) -> None:
    cfg = config_factory()
    copy_mlflow_db(tmp_path / "runs" / "mlflow.db")  # the default location, pre-initialised
    trainer, logger = fit_with_setup(cfg, tmp_path, seg_model_cls(), loaders, trainer_factory)

    uri = resolve_tracking_uri(cfg)
    assert uri == f"sqlite:///{(tmp_path / 'runs' / 'mlflow.db').resolve()}"
    client = MlflowClient(uri)
    check_finished_run(client, logger, cfg, tmp_path)
    artifact_uri = client.get_run(logger.run_id).info.artifact_uri
    assert artifact_uri.startswith((tmp_path / "runs" / "mlartifacts").resolve().as_uri())
    assert not (tmp_path / "mlruns").exists()
    run_dir = Path(client.get_run(logger.run_id).data.tags["skinet.run_dir"])
    assert {p.name for p in (run_dir / "plots").iterdir()} == {Path(p).name for p in PLOTS}
    assert any((run_dir / "checkpoints").glob("best-*.ckpt"))
    assert (run_dir / "checkpoints" / "last.ckpt").is_file()


@pytest.mark.process
def test_server_with_nested_run(
    server: LocalServer,
    tmp_path: Path,
    config_factory: Any,
    seg_model_cls: Any,
    loaders: Any,
    trainer_factory: Any,
) -> None:
    cfg = config_factory(mlflow_config={"tracking_uri": server.uri})
    client = MlflowClient(server.uri)
    experiment_id = client.create_experiment("tiny")
    parent = client.create_run(
        experiment_id, run_name="optuna_study_tiny_val_best_dice_at_threshold"
    )

    _, logger = fit_with_setup(
        cfg, tmp_path, seg_model_cls(), loaders, trainer_factory, parent_run_id=parent.info.run_id
    )

    check_finished_run(client, logger, cfg, tmp_path)
    run = client.get_run(logger.run_id)
    assert run.data.tags["mlflow.parentRunId"] == parent.info.run_id
    assert run.info.experiment_id == experiment_id
    assert not (tmp_path / "mlruns").exists()


def test_crashing_run_ends_failed(
    tmp_path: Path,
    config_factory: Any,
    seg_model_cls: Any,
    loaders: Any,
    trainer_factory: Any,
    shared_store: Any,
) -> None:
    cfg = config_factory(mlflow_config=shared_store)
    loggers, callbacks = setup_logging_and_callbacks(cfg, tmp_path / "runs" / "crash", "crash")
    trainer = trainer_factory(loggers, callbacks)
    with pytest.raises(RuntimeError, match="boom") as excinfo:
        trainer.fit(seg_model_cls(fail_at_step=1), *loaders)

    client = MlflowClient(resolve_tracking_uri(cfg))
    run_id = loggers[0].run_id
    assert client.get_run(run_id).info.status == "FAILED"  # from the logger's finalize("failed")
    loggers[0].finalize("success")  # a later success must not reopen the run
    assert client.get_run(run_id).info.status == "FAILED"

    mark_run_failed(run_id, resolve_tracking_uri(cfg), excinfo.value)  # what run.py does
    run = client.get_run(run_id)
    assert run.info.status == "FAILED"
    assert run.data.tags["error"] == "RuntimeError: boom: training_step failed on purpose"
    error_file = client.download_artifacts(run_id, "error.txt", str(tmp_path / "dl"))
    assert "Traceback" in Path(error_file).read_text()


def test_unreachable_server_fails_fast(tmp_path: Path, config_factory: Any) -> None:
    uri = f"http://127.0.0.1:{find_free_port()}"
    cfg = config_factory(mlflow_config={"tracking_uri": uri})
    start = time.monotonic()
    with pytest.raises(TrackingError, match="does not answer"):
        setup_logging_and_callbacks(cfg, tmp_path / "run", "run")
    assert time.monotonic() - start < 5


def test_callbacks_follow_config(tmp_path: Path, config_factory: Any, shared_store: Any) -> None:
    cfg = config_factory(
        mlflow_config=shared_store,
        early_stopping_config={"patience": 7, "min_delta": 0.01},
        checkpoint_config={"save_top_k": 2, "save_last": False},
    )
    loggers, callbacks = setup_logging_and_callbacks(cfg, tmp_path / "run", "run")
    by_type = {type(c): c for c in callbacks}
    assert {
        SystemMetricsThreadCallback,
        ThroughputCallback,
        EarlyStopping,
        ModelCheckpoint,
        MLflowTrainingArtifactsCallback,
        TrainingPlotsCallback,
        ResumeAwareLearningRateMonitor,
    } <= set(by_type)
    assert isinstance(by_type[ResumeAwareLearningRateMonitor], LearningRateMonitor)
    stop = by_type[EarlyStopping]
    assert (stop.monitor, stop.mode, stop.patience) == ("val_best_dice_at_threshold", "max", 7)
    ckpt = by_type[ModelCheckpoint]
    assert ckpt.dirpath == str(tmp_path / "run" / "checkpoints")
    assert (ckpt.monitor, ckpt.save_top_k) == ("val_best_dice_at_threshold", 2)
    assert not ckpt.save_last
    assert by_type[SystemMetricsThreadCallback].interval_sec == 0.05
    assert [c for c in callbacks if isinstance(c, ModelCheckpoint)] == [ckpt]


@pytest.mark.parametrize("select", ["best", "last"])
def test_the_plots_are_told_which_epoch_the_run_keeps(
    tmp_path: Path, config_factory: Any, select: str
) -> None:
    cfg = config_factory(
        use_mlflow_logger=False, use_early_stopping=False, checkpoint_config={"select": select}
    )
    _, callbacks = setup_logging_and_callbacks(cfg, tmp_path / "run", "run")
    (plots,) = [c for c in callbacks if isinstance(c, TrainingPlotsCallback)]
    assert plots.kept_epoch == f"{select} epoch"


def test_save_last_adds_an_unmonitored_checkpoint_every_epoch(
    tmp_path: Path, config_factory: Any
) -> None:
    cfg = config_factory(use_mlflow_logger=False, checkpoint_config={"save_last": True})
    _, callbacks = setup_logging_and_callbacks(cfg, tmp_path / "run", "run")
    best, last = [c for c in callbacks if isinstance(c, ModelCheckpoint)]
    assert best.monitor == "val_best_dice_at_threshold" and not best.save_last
    assert (last.monitor, last.filename, last.save_top_k, last.every_n_epochs) == (
        None,
        "last",
        1,
        1,
    )


def test_everything_off_gives_no_logger(tmp_path: Path, config_factory: Any) -> None:
    cfg = config_factory(use_mlflow_logger=False, use_early_stopping=False, use_checkpoint=False)
    loggers, callbacks = setup_logging_and_callbacks(cfg, tmp_path / "run", "run")
    assert loggers == []
    assert {type(c) for c in callbacks} == {
        EpochMetricsHistory,
        SystemMetricsThreadCallback,
        ThroughputCallback,
        ProgressLogCallback,
        StopCheck,
        NetworkSummary,
        TrainingPlotsCallback,
    }


def test_litlogger_missing_names_the_install(tmp_path: Path, config_factory: Any) -> None:
    pytest.importorskip("lightning")
    try:
        import litlogger  # noqa: F401
    except ImportError:
        pass
    else:
        pytest.skip("litlogger is installed")
    cfg = config_factory(use_mlflow_logger=False, use_litlogger_logger=True)
    with pytest.raises(ImportError, match="pip install litlogger"):
        setup_logging_and_callbacks(cfg, tmp_path / "run", "run")
