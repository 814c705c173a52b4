"""Freeze the encoder for the first epochs of a run (``TRAIN_CONFIG.freeze_encoder_epochs``).

When a model is fine-tuned on a few images of a new clinic, the first epochs' gradients come
from a decoder meeting new images; holding the encoder (the features learnt on the large
training set) still while the decoder adapts, then training everything, is the usual guard
against undoing those features. A frozen parameter gets no gradient, and the optimizer skips
it (no update, no weight decay).
"""

from __future__ import annotations

import logging

import lightning as L
from lightning.pytorch.callbacks import Callback

log = logging.getLogger(__name__)


class FreezeEncoder(Callback):
    """``requires_grad = False`` on the UNet2D's ``encoder`` for epochs ``< epochs``.

    Args:
        epochs: How many epochs the encoder stays frozen (0: never).
    """

    def __init__(self, epochs: int) -> None:
        self.epochs = epochs

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        model = getattr(pl_module, "model", pl_module)
        encoder = getattr(getattr(model, "_orig_mod", model), "encoder")  # noqa: B009
        frozen = trainer.current_epoch < self.epochs
        for parameter in encoder.parameters():
            parameter.requires_grad_(not frozen)
        if trainer.current_epoch in (0, self.epochs) and self.epochs > 0:
            log.info(
                "epoch %d: encoder %s", trainer.current_epoch, "frozen" if frozen else "trains"
            )
