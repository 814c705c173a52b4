"""What a training run produced (:class:`RunResult`) and the records it leaves in its folder and
MLflow run: the split file and the model card."""

from __future__ import annotations

import contextlib
import logging
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from skinet.checkpoints.model_card import (
    MODEL_CARD_FILE,
    CardInputs,
    build_model_card,
    invoked_command,
)
from skinet.config.experiment import ExperimentConfig
from skinet.datasets.splits import SPLIT_FILE_NAME, split_file_sha256, write_split_file
from skinet.tracking import runs as tracking_runs
from skinet.tracking.mlflow_utils import resolve_tracking_uri

if TYPE_CHECKING:
    from skinet.training.data.loaders import DataLoaders

log = logging.getLogger(__name__)

CONFIG_FILE = "config.yaml"
"""The run folder's config: as written, then what it resolved to (``RESOLVED``)."""
METRICS_FILE = "metrics.json"
"""The run folder's final metrics, written once the test is done."""


def write_run_records(
    cfg: ExperimentConfig,
    result: RunResult,
    loaders: DataLoaders,
    init_from: Mapping[str, str | None] | None = None,
    precision: str | None = None,
) -> Path:
    """Write ``splits.csv`` and ``MODEL_CARD.md`` into the run folder and log both to MLflow.

    ``init_from``: a fine-tuned run's source (``InitLineage.as_card()``); ``precision``: the
    one the Trainer ran with.

    Returns the card's path.
    """
    datasets = {"train": loaders.train_dataset, "val": loaders.val_dataset}
    if loaders.test_dataset is not None:
        datasets["test"] = loaders.test_dataset
    splits = {name: [s.id for s in dataset.samples] for name, dataset in datasets.items()}
    split_path = write_split_file(splits, result.run_dir / SPLIT_FILE_NAME)
    inputs = CardInputs(
        run_name=result.run_name,
        metrics=result.metrics,
        monitor=cfg.sweep.monitor,
        split_counts={name: len(ids) for name, ids in splits.items()},
        split_file_sha256=split_file_sha256(split_path),
        mlflow_run_id=result.mlflow_run_id,
        command=invoked_command(),
        checkpoint=str(result.best_checkpoint) if result.best_checkpoint else None,
        init_from=init_from,
        reproduce=reproduce_command(result.run_dir),
        workdir=str(Path.cwd()),
        precision=precision,
    )
    card_path = result.run_dir / MODEL_CARD_FILE
    card_path.write_text(build_model_card(cfg, inputs))
    if result.mlflow_run_id is not None:
        uri = resolve_tracking_uri(cfg)
        for path in (split_path, card_path):
            tracking_runs.log_artifact(uri, result.mlflow_run_id, path)
    return card_path


def reproduce_command(run_dir: Path) -> str:
    """``skinet train --config runs/<run>/config.yaml``: the run again from its own config (its
    seed and every ``--set``), typed from the folder it was trained in."""
    config = Path(run_dir) / CONFIG_FILE
    with contextlib.suppress(ValueError):
        config = config.resolve().relative_to(Path.cwd().resolve())
    return shlex.join(["skinet", "train", "--config", str(config)])


StopReason = Literal["max_time", "early_stopping", "max_epochs", "other"]
"""``RunResult.stopped_by``: the ``TRAIN_CONFIG.max_time`` budget ran out, early stopping
ended it, ``max_epochs`` were trained, or something else (a ``max_steps``, a callback)."""


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
    stopped_by: StopReason
    """Why the fit ended."""
