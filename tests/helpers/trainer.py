"""A bare Lightning ``Trainer`` for tests that fit a module directly."""

from __future__ import annotations

from typing import Any

import lightning as L


def bare_trainer(**kwargs: Any) -> L.Trainer:
    """A CPU ``Trainer`` without logger, checkpoints, progress bar, summary or sanity check."""
    return L.Trainer(
        accelerator="cpu",
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        **kwargs,
    )
