"""Resuming a run: finding its checkpoint, checking it can be resumed, and what a resumed run may
change in its config and what it refuses before touching the run.

A resume continues the checkpoint's optimizer, schedule and weights. Lightning restores the
optimizer's learning rate and the whole scheduler state from the checkpoint, so a changed
``lr`` would be logged as changed but never applied. Settings a resume cannot apply
(:data:`REFUSED`) are refused by name before any folder or MLflow run is touched; the
scheduler and early-stopping settings it can apply
(:class:`skinet.training.callbacks.resume.ResumeStateCallback`) and everything that only
affects how a run is executed (epochs, time budget, workers, logging, augmentations) may change.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import yaml

from skinet.checkpoints.format import CheckpointError
from skinet.checkpoints.read import describe_checkpoints_beside, read_checkpoint_file
from skinet.config.experiment import ExperimentConfig
from skinet.training.checkpoint_io import PARTIAL_SUFFIX
from skinet.training.records import CONFIG_FILE, METRICS_FILE

log = logging.getLogger(__name__)

REFUSED: dict[str, tuple[str, ...] | None] = {
    "MODEL_CONFIG": None,  # every field but the forward checks: the weights must fit
    "TRAIN_CONFIG": (
        "lr",
        "weight_decay",
        "optimizer_name",
        "loss_name",
        "bce_weight",
        "dice_reduction",
        "use_lr_scheduler",
        "scheduler_type",
        "batch_size",
        "accumulate_grad_batches",
        "seed",
        "init_checkpoint",
        "use_ema",
        "ema_config",
        "lr_scheduler_config.mode",  # ReduceLROnPlateau keeps its restored best under the old mode
        "checkpoint_config.select",  # the kept checkpoint's rule: one model per run
    ),
    "DATA_CONFIG": (
        "dataset",
        "split_file",
        "split_random_seed",
        "val_fraction",
        "test_fraction",
        "image_size",
        "resize_mode",
        "crop_dark_border",
        "color_constancy",
        "pad_value",
        "normalization_mode",
        "mean",
        "std",
        "reduced_jpeg_decode",  # preprocessing (init_from.PREPROCESSING_FIELDS)
        "max_samples_per_split",  # the training set itself
    ),
}
"""Fields a resume refuses to change, by section (``None``: every field of the section); a
dotted name is a field of a nested section."""
MODEL_FIELDS_FREE = ("validate_forward", "debug_forward")


def refused_changes(saved: ExperimentConfig, current: ExperimentConfig) -> list[str]:
    """``SECTION.field: saved -> current`` for every refused field the current config changes."""
    ours, theirs = current.to_yaml_dict(), saved.to_yaml_dict()
    changes = []
    for section, names in REFUSED.items():
        fields = names if names is not None else tuple(ours[section])
        for name in fields:
            if section == "MODEL_CONFIG" and name in MODEL_FIELDS_FREE:
                continue
            before, after = _field(theirs[section], name), _field(ours[section], name)
            if before != after:
                changes.append(f"{section}.{name}: {_show(before)} -> {_show(after)}")
    return changes


def _field(section: dict[str, Any], dotted: str) -> Any:
    value: Any = section
    for part in dotted.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return value


def _show(value: Any) -> str:
    return "null" if value is None else str(value)


def refusal_message(checkpoint: str, changes: list[str]) -> str:
    """Why a resume is refused, and what to do instead."""
    return (
        f"--resume {checkpoint}: the config changes what a resumed run cannot change: "
        + "; ".join(changes)
        + ". A resume continues the checkpoint's weights, optimizer and schedule. Resume with "
        "the run's own config.yaml, or start a new run from these weights with "
        f"`skinet train --init-from {checkpoint}` (fresh optimizer and schedule). Nothing was "
        "changed."
    )


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


def check_resume(checkpoint_path: Path, max_epochs: int, run_dir: Path) -> dict[str, Any]:
    """The checkpoint's contents; FileNotFoundError when it does not exist, a ResumeError when
    it is unreadable or its run is complete.

    A checkpoint whose training already reached ``max_epochs`` is accepted while its run has no
    ``metrics.json`` (killed between the last epoch and the end of the test): resuming it runs
    the test and completes the run.
    """
    if not checkpoint_path.is_file():
        raise FileNotFoundError(f"checkpoint to resume from not found: {checkpoint_path}")
    try:
        checkpoint = read_checkpoint_file(checkpoint_path)
    except CheckpointError as error:
        hint = describe_checkpoints_beside(checkpoint_path)
        raise ResumeError(f"--resume: {error}{hint}") from None
    done = int(checkpoint.get("epoch", -1)) + 1
    if done >= max_epochs:
        if not (run_dir / METRICS_FILE).is_file():
            log.info(
                "training of %s already ended after %d epoch(s); testing its kept checkpoint "
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


def remove_empty_checkpoints(folder: Path) -> list[Path]:
    """Remove the zero-byte ``*.ckpt`` files in ``folder`` (what a write to a full disk can
    leave) and the hidden ``.<name>.<random>.partial`` files of checkpoint writes a kill cut
    short; a resumed run would otherwise list the first beside its real checkpoints."""
    removed = []
    for path in sorted(folder.glob("*.ckpt")):
        if path.is_file() and path.stat().st_size == 0:
            path.unlink()
            log.warning("removed the empty checkpoint %s (a write that never finished)", path)
            removed.append(path)
    for path in sorted(folder.glob(f".*.ckpt.*{PARTIAL_SUFFIX}")):
        path.unlink(missing_ok=True)
        log.warning("removed %s (a checkpoint write that never finished)", path)
        removed.append(path)
    return removed
