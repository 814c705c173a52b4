"""What a run starts from, decided once before anything is made: :func:`plan_run`.

A new run gets its own folder (never one an earlier run left) and, when fine-tuned, its source
weights; a resumed run gets its checkpoint's folder, MLflow run and lineage, with the config it
continues under checked against the checkpoint's.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from skinet.checkpoints.format import CheckpointPayload
from skinet.config.experiment import ExperimentConfig, parse_config
from skinet.runtime.rank import is_launch_rank_zero
from skinet.tracking.mlflow_utils import make_run_name
from skinet.training.callbacks.setup import CHECKPOINT_DIR, last_checkpoint_path
from skinet.training.init_from import (
    InitLineage,
    InitSource,
    read_init_source,
    read_lineage,
    resume_config,
)
from skinet.training.lightning_model import check_attention_upsample
from skinet.training.resume import (
    ResumeError,
    check_resume,
    find_last_checkpoint,
    refusal_message,
    refused_changes,
    remove_empty_checkpoints,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RunPlan:
    """Where a run writes and what it starts from."""

    cfg: ExperimentConfig
    """The config it trains under (a resume's merged with what its checkpoint recorded)."""
    run_name: str
    """Its MLflow run name."""
    run_dir: Path
    """Its folder."""
    resume_from: Path | None = None
    """The checkpoint a resume continues (``None``: a new run)."""
    mlflow_run_id: str | None = None
    """The MLflow run a resume continues."""
    init_source: InitSource | None = None
    """A new fine-tuned run's source weights."""
    lineage: InitLineage | None = None
    """The fine-tuning source, new or resumed."""


def plan_run(
    cfg: ExperimentConfig, resume: str | Path | None = None, run_name: str | None = None
) -> RunPlan:
    """Decide the run's folder, name and starting point; nothing is written.

    Args:
        cfg: The validated experiment config.
        resume: A checkpoint, ``"last"`` or ``None`` (see :func:`skinet.training.run.run_training`).
        run_name: Overrides ``mlflow_config.run_name`` and the generated name.

    Raises:
        ResumeError: The checkpoint is missing, unreadable, complete, or the config changes
            what a resume cannot apply (each field named).
    """
    train_cfg = cfg.train
    # Only rank 0's name counts: the other ranks make no folder and write nothing, and learn
    # rank 0's name once their process group is up (broadcast after fit).
    run_name = (
        run_name
        or train_cfg.mlflow_config.run_name
        or make_run_name(train_cfg.experiment_name, train_cfg.seed)
    )
    run_dir = Path(train_cfg.output_dir) / run_name
    if resume is not None:
        return _plan_resume(cfg, resume, run_name, run_dir)
    cfg, init_source = read_init_source(cfg)
    return RunPlan(
        cfg=cfg,
        run_name=run_name,
        run_dir=unused_run_dir(run_dir) if is_launch_rank_zero() else run_dir,
        init_source=init_source,
        lineage=init_source.lineage if init_source is not None else None,
    )


def _plan_resume(
    cfg: ExperimentConfig, resume: str | Path, run_name: str, run_dir: Path
) -> RunPlan:
    train_cfg = cfg.train
    if str(resume) == "last":
        checkpoint = find_last_checkpoint(train_cfg.output_dir, train_cfg.experiment_name)
    else:
        checkpoint = Path(resume)
    if checkpoint.parent.name == CHECKPOINT_DIR:
        run_dir = checkpoint.parent.parent
        run_name = run_dir.name
    payload = CheckpointPayload.from_checkpoint(
        check_resume(checkpoint, train_cfg.max_epochs, run_dir), str(checkpoint)
    )
    saved = parse_config(payload.config, f"{checkpoint} (checkpoint config)")
    # A fine-tuned run resumes from its own checkpoint: its source is not read again.
    cfg = stretch_cosine(resume_config(cfg, saved), saved)
    check_attention_upsample(payload, cfg)  # before any run or folder is made
    changes = refused_changes(saved, cfg)
    if changes:
        raise ResumeError(refusal_message(str(checkpoint), changes))
    remove_empty_checkpoints(checkpoint.parent)
    return RunPlan(
        cfg=cfg,
        run_name=run_name,
        run_dir=run_dir,
        resume_from=checkpoint,
        mlflow_run_id=payload.mlflow_run_id,
        lineage=read_lineage(run_dir),
    )


def stretch_cosine(cfg: ExperimentConfig, saved: ExperimentConfig) -> ExperimentConfig:
    """``cfg`` with a cosine that ended with the checkpoint's run stretched to its new end.

    A run's ``config.yaml`` records ``cosine_annealing_config.T_max`` as the ``max_epochs`` it
    was derived from; resumed with more epochs and that ``T_max`` unchanged, the cosine would end
    at the old last epoch and train every added epoch at ``eta_min``. When the checkpoint's
    ``T_max`` equals its ``max_epochs`` and the config keeps it, ``T_max`` becomes the new
    ``max_epochs``; a ``T_max`` the config changes, or one that never matched the run's
    length (a deliberate restart period), is taken as it is.
    """
    before, now = saved.train, cfg.train
    t_max = now.cosine_annealing_config.T_max
    if (
        not (now.use_lr_scheduler and now.scheduler_type == "cosine_annealing")
        or before.cosine_annealing_config.T_max != before.max_epochs
        or t_max != before.cosine_annealing_config.T_max
        or now.max_epochs == before.max_epochs
    ):
        return cfg
    stretched = cfg.model_copy(deep=True)
    stretched.train.cosine_annealing_config.T_max = now.max_epochs
    log.info(
        "the cosine schedule ended with the run's %d epochs; it now ends at max_epochs %d "
        "(TRAIN_CONFIG.cosine_annealing_config.T_max %s -> %d)",
        before.max_epochs,
        now.max_epochs,
        t_max,
        now.max_epochs,
    )
    return stretched


def unused_run_dir(run_dir: Path) -> Path:
    """``run_dir``, or ``run_dir-2``, ``-3``, ... when an earlier run already left files there.

    Two runs with the same ``mlflow_config.run_name`` in one ``output_dir`` would otherwise
    share one ``config.yaml``, ``metrics.json`` and ``last.ckpt``; a run continues a folder only
    through ``--resume``.
    """
    candidate, number = run_dir, 1
    while candidate.exists() and any(candidate.iterdir()):
        number += 1
        candidate = run_dir.with_name(f"{run_dir.name}-{number}")
    if candidate != run_dir:
        log.warning(
            "run folder %s already holds an earlier run; this run writes to %s (to continue the "
            "earlier run instead, pass --resume %s)",
            run_dir,
            candidate.name,
            last_checkpoint_path(run_dir),
        )
    return candidate
