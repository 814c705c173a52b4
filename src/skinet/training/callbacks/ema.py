"""An exponential moving average of the weights, seen by validation and saved in checkpoints.

Lightning's ``EMAWeightAveraging`` keeps the average: it swaps it into the model for every
validation epoch (so the metrics, the threshold sweep and the choice of the best checkpoint are
the average's), saves it as the checkpoint's ``state_dict`` (so ``skinet predict``, ``evaluate``
and ``--init-from`` read the average) with the raw weights beside it, and a resume restores
both. :class:`WeightEMA` adds one thing: a checkpoint loaded to *test* keeps its averaged
weights (the parent would load the raw ones back whenever its average exists).
"""

from __future__ import annotations

from typing import Any

import lightning as L
from lightning.pytorch.callbacks import EMAWeightAveraging
from lightning.pytorch.trainer.states import TrainerFn

RAW_WEIGHTS_KEY = "current_model_state"
"""The checkpoint key of the raw (not averaged) weights, beside the averaged ``state_dict``."""


class WeightEMA(EMAWeightAveraging):
    """EMA of the weights (and buffers) after every optimizer step from ``start_step`` on.

    Args:
        decay: The old average's weight per step (``TRAIN_CONFIG.ema_config.decay``).
        start_step: The first optimizer step that updates the average.
    """

    def __init__(self, decay: float, start_step: int = 0) -> None:
        super().__init__(decay=decay, update_starting_at_step=start_step)

    def on_load_checkpoint(
        self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict[str, Any]
    ) -> None:
        if trainer.state.fn == TrainerFn.FITTING:  # a resume: the average and the raw weights
            super().on_load_checkpoint(trainer, pl_module, checkpoint)
