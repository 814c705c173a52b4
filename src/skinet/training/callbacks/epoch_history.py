"""Every epoch's validation metrics, kept so a run reports its best checkpoint's own figures.

``trainer.callback_metrics`` after ``fit`` holds the last epoch's values; the best checkpoint
is often an earlier epoch. :class:`EpochMetricsHistory` records the validation metrics
(``val_*``) of each validated epoch when its validation ends, and saves them in every checkpoint
(which is written after it, at the same hook), so a resumed run still knows the epochs trained
before the resume.
"""

from __future__ import annotations

from typing import Any

import lightning as L
from lightning.pytorch.callbacks import Callback


class EpochMetricsHistory(Callback):
    """``history[epoch]``: the ``val_*`` metrics of each validated epoch (0-based)."""

    def __init__(self) -> None:
        self.history: dict[int, dict[str, float]] = {}

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.sanity_checking:
            return
        self.history[trainer.current_epoch] = {
            name: float(value)
            for name, value in trainer.callback_metrics.items()
            if name.startswith("val_")
        }

    def state_dict(self) -> dict[str, Any]:
        return {"history": {str(epoch): dict(m) for epoch, m in self.history.items()}}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        saved = state_dict.get("history", {})
        self.history = {int(epoch): dict(metrics) for epoch, metrics in saved.items()}
