"""Progressive resizing: the first part of a run trains on smaller images
(``DATA_CONFIG.progressive_resizing``).

Smaller images train faster (on a CPU, the laptop recipe's 96 px epochs about 1.45 times the
images per second of its 128 px ones), so the first part of a run buys more epochs in the same
time; the rest trains at ``DATA_CONFIG.image_size``, the
size the model is validated, checkpointed and used at. :class:`ProgressiveResizing` chooses the
size when each epoch starts, by the share of the run done (:meth:`ProgressiveResizing.progress`),
and :class:`skinet.training.lightning_model.LightningModel` scales each training batch to it on
its device (:func:`scale_batch`) after the transfer and any device augmentation.
"""

from __future__ import annotations

import logging
from typing import Any

import lightning as L
import torch.nn.functional as F
from lightning.pytorch.callbacks import Callback
from torch import Tensor

from skinet.keys import MetricsKey
from skinet.training.schedules import run_share

log = logging.getLogger(__name__)


def scale_batch(images: Tensor, masks: Tensor, size: int) -> tuple[Tensor, Tensor]:
    """``images`` ``(B, C, H, W)`` and binary ``masks`` ``(B, 1, H, W)`` scaled to ``size``.

    Images by antialiased bilinear interpolation; masks by the share of each new pixel that
    was lesion (area interpolation), kept where it is at least half.
    """
    small = F.interpolate(images, size=(size, size), mode="bilinear", antialias=True)
    share = F.interpolate(masks.float(), size=(size, size), mode="area")
    return small, (share >= 0.5).to(masks.dtype)


class ProgressiveResizing(Callback):
    """Chooses the side of each training epoch's images: ``small`` for the first ``fraction``
    of the run, then ``full`` for good.

    Once an epoch has trained at ``full`` the run never goes back to ``small``, even if a
    resume raises ``max_epochs`` or ``max_time``: the epoch it switched at is part of the
    callback's state in every checkpoint.

    Args:
        small: The side of the first part's training images.
        full: ``DATA_CONFIG.image_size``.
        fraction: The share of the run trained at ``small``.
    """

    def __init__(self, small: int, full: int, fraction: float) -> None:
        self.small, self.full, self.fraction = small, full, fraction
        self.size: int | None = None
        """The current epoch's side; ``None`` before training starts."""
        self.full_from: int | None = None
        """The first epoch trained at ``full``."""

    @staticmethod
    def progress(trainer: L.Trainer) -> float:
        """The share of the run done when an epoch starts: of ``max_epochs``, or of
        ``max_time`` when it is set and further along (whichever ends the run first)."""
        return run_share(trainer, trainer.current_epoch)

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        epoch = trainer.current_epoch
        # Every rank takes rank zero's decision: their clocks differ by a little.
        if self.full_from is None and trainer.strategy.broadcast(
            self.progress(trainer) >= self.fraction
        ):
            self.full_from = epoch
        size = self.full if self.full_from is not None and epoch >= self.full_from else self.small
        if size != self.size and trainer.is_global_zero:
            log.info(
                "training on %d px images from epoch %d%s",
                size,
                epoch + 1,
                f" (DATA_CONFIG.progressive_resizing: the first {self.fraction:.0%} of the run)"
                if size == self.small
                else "",
            )
        self.size = size
        pl_module.log(
            MetricsKey.TRAIN_IMAGE_SIZE.value,
            float(size),
            on_step=False,
            on_epoch=True,
            sync_dist=True,
        )

    def state_dict(self) -> dict[str, Any]:
        return {"full_from": self.full_from}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.full_from = state_dict.get("full_from")


def find_resizing(trainer: L.Trainer) -> ProgressiveResizing | None:
    """The trainer's :class:`ProgressiveResizing` callback, if it has one."""
    callbacks = getattr(trainer, "callbacks", [])
    return next((c for c in callbacks if isinstance(c, ProgressiveResizing)), None)
