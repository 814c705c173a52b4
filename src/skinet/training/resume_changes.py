"""What a resumed run may change in its config, and what it refuses before touching the run.

A resume continues the checkpoint's optimizer, schedule and weights. Lightning restores the
optimizer's learning rate and the whole scheduler state from the checkpoint, so a changed
``lr`` would be logged as changed but never applied. Settings a resume cannot apply
(:data:`REFUSED`) are refused by name before any folder or MLflow run is touched; the
scheduler and early-stopping settings it can apply
(:class:`skinet.training.callbacks.resume.ResumeStateCallback`) and everything that only
affects how a
run is executed (epochs, time budget, workers, logging, augmentations) may change.
"""

from __future__ import annotations

from typing import Any

from skinet.config.experiment import ExperimentConfig

REFUSED: dict[str, tuple[str, ...] | None] = {
    "MODEL_CONFIG": None,  # every field but the forward checks: the weights must fit
    "TRAIN_CONFIG": (
        "lr",
        "weight_decay",
        "optimizer_name",
        "loss_name",
        "use_lr_scheduler",
        "scheduler_type",
        "batch_size",
        "accumulate_grad_batches",
        "seed",
        "init_checkpoint",
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
    ),
}
"""Fields a resume refuses to change, by section (``None``: every field of the section)."""
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
            before, after = theirs[section].get(name), ours[section].get(name)
            if before != after:
                changes.append(f"{section}.{name}: {_show(before)} -> {_show(after)}")
    return changes


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
