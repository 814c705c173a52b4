"""What a threshold sweep counts and how it chooses: per-threshold ``[tp, fp, fn]`` counts,
Dice and IoU from them, and the selection rules.

Counts are ``[tp, fp, fn]`` per candidate threshold (``(T, 3)`` for a set, ``(N, T, 3)`` per
image), as :func:`compute_threshold_counts` makes them; candidates are
strictly descending, so ``argmax`` gives ties to the highest threshold. Where a denominator is 0
(mask and prediction both empty) Dice and IoU are 1.0. The training sweep
(:class:`~skinet.metrics.thresholds.ThresholdSweep`), the reference
:func:`~skinet.metrics.thresholds.find_best_threshold` and ``skinet evaluate --tune-threshold``
all choose here.
"""

from __future__ import annotations

import torch
from torch import Tensor

SELECTIONS = ("pooled_dice", "per_image", "guarded")
"""How a sweep picks its threshold (:func:`select_threshold`)."""
GUARD_DRAWS, GUARD_CONFIDENCE = 2000, 0.95
GUARD_MIN_IMAGES = 6
"""The fewest images on which the ``guarded`` rules see a clear gain. On fewer, even every
image gaining is no evidence at the guard's confidence: five images all gain by chance with
probability 1/32 when nothing changes, above the 2.5% a one-sided 95% interval allows (a sign
test needs six); and on one image the bootstrap interval has no width at all."""


def compare_dtype(probs: Tensor) -> torch.dtype:
    """The dtype ``probs`` are compared in against the float32 thresholds."""
    # float16/bfloat16 -> float32 is exact; float64 probs keep float64 (float32 t is exact there).
    return torch.promote_types(probs.dtype, torch.float32)


def safe_ratio(num: Tensor, den: Tensor, dtype: torch.dtype) -> Tensor:
    """``num / den`` on integer counts, 1.0 where ``den == 0`` (both empty)."""
    return torch.where(den == 0, 1.0, num.to(dtype) / den.clamp_min(1).to(dtype))


def pooled_dice(per_image: Tensor) -> Tensor:
    """``(T,)`` Dice pooled over every pixel from per-image counts ``(N, T, 3)`` (1.0 when the
    whole set is empty at a threshold, as in the sweep)."""
    tp, fp, fn = per_image.sum(0).unbind(-1)
    return safe_ratio(2 * tp, 2 * tp + fp + fn, torch.float64)


def per_image_jaccard(per_image: Tensor) -> Tensor:
    """``(N, T)`` IoU from per-image ``[tp, fp, fn]`` counts ``(N, T, 3)`` (1.0 when both empty)."""
    tp, fp, fn = per_image.unbind(-1)
    return safe_ratio(tp, tp + fp + fn, torch.float64)


def select_threshold(
    dice: Tensor,
    per_image: Tensor,
    thresholds: Tensor,
    selection: str = "pooled_dice",
    reference: float | None = None,
) -> int:
    """The index of the chosen threshold among the descending ``thresholds``.

    - ``pooled_dice``: the highest Dice pooled over every pixel of the set (``dice``, ``(T,)``);
    - ``per_image``: the highest mean per-image Jaccard (what evaluation reports), which a few
      large lesions do not dominate;
    - ``guarded``: ``per_image``'s choice only when its gain over ``reference`` in mean
      per-image Jaccard is clear (:func:`is_clear_gain`: the lower end of a 95% paired
      bootstrap interval over at least :data:`GUARD_MIN_IMAGES` images is above 0), else
      ``reference``: a few images rarely justify a move.

    Ties go to the highest threshold. ``reference`` must be one of ``thresholds``.
    """
    if selection not in SELECTIONS:
        raise ValueError(f"threshold selection must be one of {SELECTIONS}, got {selection!r}")
    if selection == "pooled_dice":
        # argmax returns the first maximum; the sweep is descending: the highest threshold wins.
        return int(dice.argmax())
    jaccard = per_image_jaccard(per_image.cpu())
    best = int(jaccard.mean(0).argmax())
    if selection == "per_image":
        return best
    if reference is None:
        raise ValueError("the guarded threshold selection needs a reference threshold")
    matches = torch.nonzero(torch.isclose(thresholds.cpu(), torch.tensor(float(reference))))
    if matches.numel() == 0:
        raise ValueError(f"the reference threshold {reference} is not among the candidates")
    kept = int(matches[0])
    if best == kept:
        return kept
    return best if is_clear_gain(jaccard[:, best] - jaccard[:, kept]) else kept


def is_clear_gain(gain: Tensor) -> bool:
    """The ``guarded`` rules' test of per-image ``gain`` ``(N,)``: at least
    :data:`GUARD_MIN_IMAGES` images, and the lower end of :func:`guard_interval` above 0."""
    return gain.numel() >= GUARD_MIN_IMAGES and guard_interval(gain)[0] > 0.0


def guard_interval(gain: Tensor) -> tuple[float, float]:
    """The 95% paired bootstrap interval of the mean of per-image ``gain`` ``(N,)`` that the
    ``guarded`` rules judge by: a change is made only when its lower end is above 0.

    Seeded (2000 draws of the images with replacement), so one set always gives one answer.
    """
    gain = gain.to(torch.float64).flatten()
    if gain.numel() == 0:
        raise ValueError("the guarded rule needs at least one image")
    generator = torch.Generator().manual_seed(0)
    draws = torch.randint(0, gain.numel(), (GUARD_DRAWS, gain.numel()), generator=generator)
    tail = (1.0 - GUARD_CONFIDENCE) / 2.0
    ends = torch.tensor([tail, 1.0 - tail], dtype=gain.dtype)
    low, high = torch.quantile(gain[draws].mean(1), ends)
    return float(low), float(high)


def with_reference(thresholds: Tensor, reference: float | None) -> Tensor:
    """``thresholds`` (descending) with ``reference`` added when it is not one of them."""
    if reference is None or bool(torch.isclose(thresholds, torch.tensor(reference)).any()):
        return thresholds
    return torch.cat([thresholds, torch.tensor([reference])]).sort(descending=True).values


def compute_threshold_counts(probs: Tensor, masks: Tensor, thresholds: Tensor) -> Tensor:
    """Per-image ``[tp, fp, fn]`` at every threshold in ``O(B·H·W + B·T)`` memory.

    Each pixel is bucketised once: with the thresholds ascending, ``bucketize(right=True)``
    returns ``k``, how many thresholds are ``<= p``: exactly how many satisfy ``p >= t`` (the same
    float comparison as the reference). In the descending order the pixel is then foreground
    for every threshold index ``>= T - k``, so a histogram of these start indices per image and
    per mask class, cumulatively summed, gives ``tp`` and ``fp`` for all thresholds at once.

    Args:
        probs: ``(B, P)`` probabilities.
        masks: ``(B, P)`` bool masks.
        thresholds: Non-increasing ``(T,)`` float32 thresholds on ``probs``' device.

    Returns:
        ``(B, T, 3)`` int64 counts ``[tp, fp, fn]``.
    """
    batch, num_t = probs.shape[0], thresholds.numel()
    dtype = compare_dtype(probs)
    ascending = thresholds.to(dtype).flip(0).contiguous()
    # int32 indices halve the memory traffic; B * 2 * (T + 1) bins are far below 2**31.
    num_on = torch.bucketize(probs.to(dtype).contiguous(), ascending, right=True, out_int32=True)
    start = num_t - num_on  # first descending index at which the pixel is predicted foreground
    # Bin layout (B, 2, T + 1): image, mask class (0 = background, 1 = lesion), start index.
    image = torch.arange(batch, device=probs.device, dtype=torch.int32)[:, None]
    bins = (image * 2 + masks) * (num_t + 1) + start
    hist = torch.bincount(bins.flatten(), minlength=batch * 2 * (num_t + 1))
    cum = hist.view(batch, 2, num_t + 1)[..., :num_t].cumsum(-1)
    fp, tp = cum[:, 0], cum[:, 1]
    fn = masks.sum(-1, keepdim=True) - tp
    return torch.stack([tp, fp, fn], dim=-1)
