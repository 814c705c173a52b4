"""Human-readable summaries printed at the end of a command."""

from __future__ import annotations

import shlex
from typing import TYPE_CHECKING

from rich.table import Table

from skinet.config.experiment import ExperimentConfig
from skinet.keys import MetricsKey
from skinet.runtime.console import console
from skinet.tracking.mlflow_utils import resolve_tracking_uri, sqlite_path

if TYPE_CHECKING:
    from skinet.training.records import RunResult

HEADLINE_METRICS = (
    "test_dice",
    "test_iou",
    "test_mean_dice_per_image",
    "test_mean_iou_per_image",
    "test_threshold_used",
    "val_best_dice_at_threshold",
    "val_mean_dice_per_image",
    "val_optimal_threshold",
)


STOPPED_BY = {
    "max_time": "the time budget (TRAIN_CONFIG.max_time)",
    "early_stopping": "early stopping (TRAIN_CONFIG.early_stopping_config)",
    "max_epochs": "TRAIN_CONFIG.max_epochs",
    "other": "a callback or a step limit",
}
"""How the summary names each ``RunResult.stopped_by``."""


def print_run_summary(cfg: ExperimentConfig, result: RunResult) -> None:
    """A table of the headline metrics and where the run wrote its outputs."""
    out = console()
    metrics = result.metrics
    table = Table(title="SkiNet run summary", show_header=True)
    table.add_column("metric")
    table.add_column("value", justify="right")
    monitor = cfg.sweep.monitor
    kept = cfg.train.checkpoint_config.kept_epoch
    table.add_row(f"{monitor} ({kept})", f"{metrics.get(monitor, float('nan')):.4f}")
    for name in HEADLINE_METRICS:
        if name in metrics and name != monitor:
            table.add_row(name, f"{metrics[name]:.4f}")
    out.print(table)
    tested = MetricsKey.TEST_THRESHOLD_USED.value in metrics
    out.print(
        f"trained {result.epochs_trained} epoch(s) in {result.fit_seconds:.0f} s "
        f"({'fit and test' if tested else 'fit; no test split'}); "
        f"stopped by {STOPPED_BY[result.stopped_by]}"
    )
    # Paths print whole (no wrap, no markup): a reader copies them, and "[...]" is a name.
    out.print(f"run folder:       {result.run_dir}", markup=False, soft_wrap=True)
    # "best checkpoint:" or "last checkpoint:", the epoch checkpoint_config.select keeps.
    label = f"{cfg.train.checkpoint_config.select} checkpoint:"
    out.print(f"{label}  {result.best_checkpoint}", markup=False, soft_wrap=True)
    if result.mlflow_run_id:
        out.print(f"MLflow run id:    {result.mlflow_run_id}")
    if cfg.train.use_mlflow_logger:
        uri = resolve_tracking_uri(cfg)
        if sqlite_path(uri) is not None:
            hint = f"mlflow ui --backend-store-uri {shlex.quote(uri)}"
            out.print(f"MLflow UI:        {hint}", markup=False, soft_wrap=True)
        else:
            out.print(f"MLflow tracking:  {uri}", markup=False, soft_wrap=True)
