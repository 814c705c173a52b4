"""Segmentation losses on raw logits, chosen by ``TRAIN_CONFIG.loss_name``.

Every loss takes ``(logits, masks)`` of shape ``(B, 1, H, W)`` (float masks in ``{0, 1}``) and
returns a scalar. The model emits raw logits; the sigmoid is applied here only where the loss
needs probabilities (soft Dice), so BCE keeps the numerically stable log-sum-exp form.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from skinet.config.train import DiceReduction, LossName


def _check_shapes(logits: Tensor, masks: Tensor) -> None:
    if logits.shape != masks.shape:
        raise ValueError(
            f"logits and masks must have the same shape, got {tuple(logits.shape)} "
            f"and {tuple(masks.shape)}"
        )


class SoftDiceLoss(nn.Module):
    """Soft Dice loss on ``sigmoid(logits)``, over the batch or per image.

    With ``p = sigmoid(logits)``, ``m = masks`` and sums over every pixel of the whole batch
    (``reduction="batch"``)::

        loss = 1 - (2 * sum(p * m) + smooth) / (sum(p) + sum(m) + smooth)

    Summing over the batch matches the dataset-aggregated Dice that validation sweeps; a large
    lesion then weighs more than a small one. ``reduction="image"`` takes the same ratio over
    each image's pixels and averages it over the batch, so every image counts once, as in the
    mean per-image score (MONAI's ``DiceLoss`` default). ``smooth`` keeps the loss defined (and
    0) when both the masks and the prediction are empty.

    Args:
        smooth: Additive smoothing in numerator and denominator; must be positive.
        reduction: ``"batch"`` or ``"image"`` (``TRAIN_CONFIG.dice_reduction``).
    """

    def __init__(self, smooth: float = 1.0, reduction: DiceReduction = "batch") -> None:
        super().__init__()
        if not smooth > 0:
            raise ValueError(f"smooth must be > 0, got {smooth}")
        if reduction not in ("batch", "image"):
            raise ValueError(f"reduction must be 'batch' or 'image', got {reduction!r}")
        self.smooth = smooth
        self.reduction = reduction

    def forward(self, logits: Tensor, masks: Tensor) -> Tensor:
        _check_shapes(logits, masks)
        # float32 sums: under autocast a half-precision sum over a batch overflows or loses mass.
        probs = torch.sigmoid(logits.float())
        masks = masks.float()
        dims = tuple(range(1, probs.ndim)) if self.reduction == "image" else None
        intersection = (probs * masks).sum(dim=dims)
        total = probs.sum(dim=dims) + masks.sum(dim=dims)
        dice = (2.0 * intersection + self.smooth) / (total + self.smooth)
        return 1.0 - dice.mean()


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
        dice_reduction: The Dice term over the batch or per image (see :class:`SoftDiceLoss`).
    """

    def __init__(
        self, bce_weight: float = 0.5, smooth: float = 1.0, dice_reduction: DiceReduction = "batch"
    ) -> None:
        super().__init__()
        if not 0.0 <= bce_weight <= 1.0:
            raise ValueError(f"bce_weight must be in [0, 1], got {bce_weight}")
        self.bce_weight = bce_weight
        self.bce = BCELoss()
        self.dice = SoftDiceLoss(smooth=smooth, reduction=dice_reduction)

    def forward(self, logits: Tensor, masks: Tensor) -> Tensor:
        bce = self.bce(logits, masks)
        dice = self.dice(logits, masks)
        return self.bce_weight * bce + (1.0 - self.bce_weight) * dice


def deep_supervision_weights(levels: int) -> list[float]:
    """Weights of the full-resolution output and ``levels`` coarser ones: halving per level,
    summing to 1 (``levels=2``: 4/7, 2/7, 1/7); nnU-Net halves its weights the same way (it
    also gives its coarsest decoder map, which ``levels`` leaves out here, a weight of 0)."""
    raw = [0.5**level for level in range(levels + 1)]
    return [weight / sum(raw) for weight in raw]


class DeepSupervisionLoss(nn.Module):
    """A loss over the full-resolution logits and coarser auxiliary logits.

    Each output is scored by ``loss`` against the masks resized to its size by area
    averaging (soft targets at a coarse lesion border), and the terms are weighted by
    :func:`deep_supervision_weights`.

    Args:
        loss: The loss of one output, ``(logits, masks) -> scalar``.
        levels: Coarser outputs besides the full-resolution one.
    """

    def __init__(self, loss: nn.Module, levels: int) -> None:
        super().__init__()
        self.loss = loss
        self.weights = deep_supervision_weights(levels)

    def terms(self, outputs: Sequence[Tensor], masks: Tensor) -> list[Tensor]:
        """The unweighted loss of each output, full resolution first."""
        if len(outputs) != len(self.weights):
            raise ValueError(
                f"deep supervision expects {len(self.weights)} outputs (full resolution and "
                f"{len(self.weights) - 1} coarser), got {len(outputs)}"
            )
        masks = masks.float()
        terms = []
        for logits in outputs:
            size = tuple(logits.shape[-2:])
            same = size == tuple(masks.shape[-2:])
            target = masks if same else F.interpolate(masks, size=size, mode="area")
            terms.append(self.loss(logits, target))
        return terms

    def combine(self, terms: Sequence[Tensor]) -> Tensor:
        """The weighted sum of :meth:`terms`: what training minimises."""
        return torch.stack([w * term for w, term in zip(self.weights, terms, strict=True)]).sum()

    def forward(self, outputs: Sequence[Tensor], masks: Tensor) -> Tensor:
        return self.combine(self.terms(outputs, masks))


LOSSES: dict[str, Callable[[float, DiceReduction], nn.Module]] = {
    "BCE": lambda bce_weight, dice_reduction: BCELoss(),
    "DICE": lambda bce_weight, dice_reduction: SoftDiceLoss(reduction=dice_reduction),
    "BCE_DICE": lambda bce_weight, dice_reduction: BCEDiceLoss(
        bce_weight=bce_weight, dice_reduction=dice_reduction
    ),
}
"""Each ``TRAIN_CONFIG.loss_name`` and how it is built from ``bce_weight`` and
``dice_reduction`` (a loss ignores what it has no term for)."""


def build_loss(
    name: LossName, bce_weight: float = 0.5, dice_reduction: DiceReduction = "batch"
) -> nn.Module:
    """Build the loss named by ``TRAIN_CONFIG.loss_name``.

    Args:
        name: One of ``"BCE"``, ``"DICE"``, ``"BCE_DICE"``.
        bce_weight: ``TRAIN_CONFIG.bce_weight``: the BCE term's weight in ``BCE_DICE``.
        dice_reduction: ``TRAIN_CONFIG.dice_reduction``: the soft Dice term over the batch or
            per image.

    Returns:
        A module mapping ``(logits, masks)`` of shape ``(B, 1, H, W)`` to a scalar loss.

    Raises:
        ValueError: If ``name`` is not one of the allowed names.
    """
    if name not in LOSSES:
        raise ValueError(f"Unknown loss_name {name!r}; allowed: {', '.join(LOSSES)}")
    return LOSSES[name](bce_weight, dice_reduction)
