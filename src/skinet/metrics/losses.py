"""Segmentation losses on raw logits, chosen by ``TRAIN_CONFIG.loss_name``.

Every loss takes ``(logits, masks)`` of shape ``(B, 1, H, W)`` (float masks in ``{0, 1}``) and
returns a scalar. The model emits raw logits; the sigmoid is applied here only where the loss
needs probabilities (soft Dice), so BCE keeps the numerically stable log-sum-exp form.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from skinet.config.train import LossName


def _check_shapes(logits: Tensor, masks: Tensor) -> None:
    if logits.shape != masks.shape:
        raise ValueError(
            f"logits and masks must have the same shape, got {tuple(logits.shape)} "
            f"and {tuple(masks.shape)}"
        )


class SoftDiceLoss(nn.Module):
    """Batch-level soft Dice loss on ``sigmoid(logits)``.

    With ``p = sigmoid(logits)``, ``m = masks`` and sums over every pixel of the whole batch::

        loss = 1 - (2 * sum(p * m) + smooth) / (sum(p) + sum(m) + smooth)

    Summing over the batch (not averaging per-image Dice) matches the dataset-aggregated Dice
    that validation reports, and ``smooth`` keeps the loss defined (and 0) when both the masks
    and the prediction are empty.

    Args:
        smooth: Additive smoothing in numerator and denominator; must be positive.
    """

    def __init__(self, smooth: float = 1.0) -> None:
        super().__init__()
        if not smooth > 0:
            raise ValueError(f"smooth must be > 0, got {smooth}")
        self.smooth = smooth

    def forward(self, logits: Tensor, masks: Tensor) -> Tensor:
        _check_shapes(logits, masks)
        # float32 sums: under autocast a half-precision sum over a batch overflows or loses mass.
        probs = torch.sigmoid(logits.float())
        masks = masks.float()
        intersection = (probs * masks).sum()
        dice = (2.0 * intersection + self.smooth) / (probs.sum() + masks.sum() + self.smooth)
        return 1.0 - dice


class BCELoss(nn.Module):
    """Mean binary cross-entropy on logits (``binary_cross_entropy_with_logits``)."""

    def forward(self, logits: Tensor, masks: Tensor) -> Tensor:
        _check_shapes(logits, masks)
        return F.binary_cross_entropy_with_logits(logits.float(), masks.float())


class BCEDiceLoss(nn.Module):
    """``bce_weight * BCE + (1 - bce_weight) * soft Dice``; 0.5/0.5 by default.

    Args:
        bce_weight: Weight of the BCE term, in ``[0, 1]``.
        smooth: Smoothing of the Dice term (see :class:`SoftDiceLoss`).
    """

    def __init__(self, bce_weight: float = 0.5, smooth: float = 1.0) -> None:
        super().__init__()
        if not 0.0 <= bce_weight <= 1.0:
            raise ValueError(f"bce_weight must be in [0, 1], got {bce_weight}")
        self.bce_weight = bce_weight
        self.bce = BCELoss()
        self.dice = SoftDiceLoss(smooth=smooth)

    def forward(self, logits: Tensor, masks: Tensor) -> Tensor:
        bce = self.bce(logits, masks)
        dice = self.dice(logits, masks)
        return self.bce_weight * bce + (1.0 - self.bce_weight) * dice


LOSSES: dict[str, type[nn.Module]] = {
    "BCE": BCELoss,
    "DICE": SoftDiceLoss,
    "BCE_DICE": BCEDiceLoss,
}


def build_loss(name: LossName) -> nn.Module:
    """Build the loss named by ``TRAIN_CONFIG.loss_name``.

    Args:
        name: One of ``"BCE"``, ``"DICE"``, ``"BCE_DICE"``.

    Returns:
        A module mapping ``(logits, masks)`` of shape ``(B, 1, H, W)`` to a scalar loss.

    Raises:
        ValueError: If ``name`` is not one of the allowed names.
    """
    if name not in LOSSES:
        raise ValueError(f"Unknown loss_name {name!r}; allowed: {', '.join(LOSSES)}")
    return LOSSES[name]()
