"""Losses on raw logits: hand-computed values, gradients and bad input."""

from __future__ import annotations

import math

import pytest
import torch

from skinet.metrics.losses import BCEDiceLoss, SoftDiceLoss, build_loss

LN3 = math.log(3.0)


def _tensor(values: list[float]) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float32).reshape(1, 1, 2, 2)


# logits [ln3, -ln3, 0, 0] -> probs [0.75, 0.25, 0.5, 0.5]; masks [1, 0, 1, 0].
# BCE: mean of [-ln .75, -ln .75, ln 2, ln 2] = ln(8/3) / 2.
# Dice: (2 * 1.25 + 1) / (2 + 2 + 1) = 0.7 -> loss 0.3.
HAND_LOGITS = [LN3, -LN3, 0.0, 0.0]
HAND_MASKS = [1.0, 0.0, 1.0, 0.0]
HAND_BCE = math.log(8.0 / 3.0) / 2.0
HAND_DICE = 0.3


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("BCE", HAND_BCE),
        ("DICE", HAND_DICE),
        ("BCE_DICE", 0.5 * HAND_BCE + 0.5 * HAND_DICE),
    ],
)
def test_hand_computed_values(name: str, expected: float) -> None:
    loss = build_loss(name)(_tensor(HAND_LOGITS), _tensor(HAND_MASKS))
    assert loss.ndim == 0
    assert loss.item() == pytest.approx(expected, rel=1e-6)


def test_zero_logits_give_ln2_bce_and_half_probability_dice() -> None:
    logits = torch.zeros(2, 1, 4, 4)
    masks = torch.zeros(2, 1, 4, 4)
    masks[:, :, :2] = 1.0  # half of every image is lesion
    assert build_loss("BCE")(logits, masks).item() == pytest.approx(math.log(2.0), rel=1e-6)
    # sum(p*m) = 8, sum(p) = 16, sum(m) = 16: 1 - (16 + 1) / (32 + 1)
    assert build_loss("DICE")(logits, masks).item() == pytest.approx(1 - 17 / 33, rel=1e-6)


@pytest.mark.parametrize("name", ["BCE", "DICE", "BCE_DICE"])
def test_confident_correct_prediction_has_near_zero_loss(name: str) -> None:
    masks = (torch.rand(2, 1, 8, 8, generator=torch.Generator().manual_seed(0)) > 0.5).float()
    logits = (masks * 2 - 1) * 30.0
    assert build_loss(name)(logits, masks).item() == pytest.approx(0.0, abs=1e-6)


def test_dice_is_zero_for_empty_masks_and_empty_prediction() -> None:
    # The smooth term keeps the loss defined (and perfect) when there is nothing to segment.
    logits = torch.full((2, 1, 4, 4), -30.0)
    assert SoftDiceLoss()(logits, torch.zeros_like(logits)).item() == pytest.approx(0.0, abs=1e-6)


def test_dice_is_batch_level_not_mean_of_images() -> None:
    # Image 0 is perfect (p=m=1 over 4 px), image 1 predicts 0.5 on an empty mask (4 px).
    logits = torch.stack([torch.full((1, 2, 2), 30.0), torch.zeros(1, 2, 2)])
    masks = torch.stack([torch.ones(1, 2, 2), torch.zeros(1, 2, 2)])
    # sum(p*m) = 4, sum(p) = 4 + 2, sum(m) = 4: 1 - (8 + 1) / (10 + 1)
    assert SoftDiceLoss()(logits, masks).item() == pytest.approx(1 - 9 / 11, rel=1e-5)


@pytest.mark.parametrize("name", ["BCE", "DICE", "BCE_DICE"])
def test_gradients_flow_to_logits(name: str) -> None:
    gen = torch.Generator().manual_seed(1)
    logits = torch.randn(2, 1, 8, 8, generator=gen, requires_grad=True)
    masks = (torch.rand(2, 1, 8, 8, generator=gen) > 0.5).float()
    build_loss(name)(logits, masks).backward()
    assert logits.grad is not None
    assert torch.isfinite(logits.grad).all()
    assert (logits.grad != 0).all()


@pytest.mark.parametrize("name", ["BCE", "DICE", "BCE_DICE"])
def test_half_precision_logits_give_float32_loss(name: str) -> None:
    logits = torch.zeros(1, 1, 4, 4, dtype=torch.bfloat16)
    loss = build_loss(name)(logits, torch.ones_like(logits))
    assert loss.dtype == torch.float32


def test_unknown_name_lists_allowed() -> None:
    with pytest.raises(ValueError, match="allowed: BCE, DICE, BCE_DICE"):
        build_loss("FOCAL")


@pytest.mark.parametrize("name", ["BCE", "DICE", "BCE_DICE"])
def test_shape_mismatch_raises(name: str) -> None:
    with pytest.raises(ValueError, match="same shape"):
        build_loss(name)(torch.zeros(2, 1, 4, 4), torch.zeros(2, 4, 4))


def test_bad_constructor_arguments_raise() -> None:
    with pytest.raises(ValueError, match="smooth"):
        SoftDiceLoss(smooth=0.0)
    with pytest.raises(ValueError, match="bce_weight"):
        BCEDiceLoss(bce_weight=1.5)


def test_bce_weight_weighs_the_terms_of_bce_dice() -> None:
    loss = build_loss("BCE_DICE", bce_weight=0.25)(_tensor(HAND_LOGITS), _tensor(HAND_MASKS))
    assert loss.item() == pytest.approx(0.25 * HAND_BCE + 0.75 * HAND_DICE, rel=1e-6)
    only_dice = build_loss("BCE_DICE", bce_weight=0.0)(_tensor(HAND_LOGITS), _tensor(HAND_MASKS))
    assert only_dice.item() == pytest.approx(HAND_DICE, rel=1e-6)


def _two_lesions() -> tuple[torch.Tensor, torch.Tensor]:
    """A large lesion predicted exactly and a one-pixel lesion missed, in one batch."""
    masks = torch.zeros(2, 1, 2, 2)
    masks[0] = 1.0
    masks[1, 0, 0, 0] = 1.0
    logits = torch.full((2, 1, 2, 2), -30.0)
    logits[0] = 30.0
    return logits, masks


@pytest.mark.parametrize("name", ["DICE", "BCE_DICE"])
def test_dice_reduction_image_counts_every_image_once(name: str) -> None:
    logits, masks = _two_lesions()
    bce = build_loss("BCE")(logits, masks).item()
    # batch: (2 * 4 + 1) / (4 + 5 + 1) = 0.9; per image: (9 / 9 + 1 / 2) / 2 = 0.75.
    batch, image = 1 - 0.9, 1 - 0.75
    weight = 0.5 if name == "BCE_DICE" else 0.0
    for reduction, dice in (("batch", batch), ("image", image)):
        loss = build_loss(name, dice_reduction=reduction)(logits, masks).item()
        assert loss == pytest.approx(weight * bce + (1 - weight) * dice, rel=1e-5)


def test_dice_reductions_agree_on_a_batch_of_one() -> None:
    logits, masks = _tensor(HAND_LOGITS), _tensor(HAND_MASKS)
    assert SoftDiceLoss(reduction="image")(logits, masks).item() == pytest.approx(HAND_DICE)
    with pytest.raises(ValueError, match="reduction must be 'batch' or 'image'"):
        SoftDiceLoss(reduction="pixel")  # type: ignore[arg-type]
