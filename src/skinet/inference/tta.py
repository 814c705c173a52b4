"""Test-time augmentation: averaging probabilities over flips."""

from __future__ import annotations

import torch
from torch import Tensor, nn

FLIPS: tuple[tuple[int, ...], ...] = ((), (-1,), (-2,), (-2, -1))
"""Flip dims of the TTA views: none, horizontal, vertical, both."""


def predict_probs(model: nn.Module, images: Tensor, tta: bool = False) -> Tensor:
    """Foreground probabilities ``(B, 1, H, W)`` for normalised images ``(B, C, H, W)``.

    With ``tta`` the model sees the four flips of the batch; each output is flipped back and
    the sigmoid probabilities (not the logits) are averaged.
    """
    if not tta:
        return torch.sigmoid(model(images).float())
    total = torch.zeros((), device=images.device)
    for dims in FLIPS:
        view = images.flip(dims) if dims else images
        probs = torch.sigmoid(model(view).float())
        total = total + (probs.flip(dims) if dims else probs)
    return total / len(FLIPS)
