"""Best-threshold selection for binary segmentation: reference function and streaming metric.

:func:`find_best_threshold` is the guide's reference definition: one vectorised broadcast of
``probs >= t`` over the whole set for every candidate ``t`` in :data:`THRESHOLDS`, Dice
``2·tp / (2·tp + fp + fn)`` per threshold, and ``argmax`` over the descending sweep (so the
highest threshold wins ties). It holds the whole set in memory and is meant for tests, offline
evaluation and as the specification.

:class:`ThresholdSweep` is the ``torchmetrics.Metric`` used in training. It accumulates integer
``tp/fp/fn`` per threshold (``dist_reduce_fx="sum"``) and per image, never the probabilities,
and returns exactly (``==``) what :func:`find_best_threshold` returns on the concatenated data.

Conventions shared by both:

* A pixel is predicted foreground at threshold ``t`` iff ``probs >= t``, compared in
  ``promote_types(probs.dtype, float32)`` against the float32 thresholds.
* Masks are foreground where ``masks > 0.5`` (bool masks as they are).
* Zero denominator: when ``2·tp + fp + fn == 0`` (mask and prediction both empty) Dice is 1.0,
  for the dataset aggregate and per image; IoU ``tp / (tp + fp + fn)`` is 1.0 likewise. An image
  with an empty mask and a non-empty prediction scores 0.

The counting, the Dice and IoU from counts and the selection rules live in
:mod:`skinet.metrics.threshold_counts`; both implementations end in :func:`_summarise` here.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any

import torch
from torch import Tensor
from torchmetrics import Metric
from torchmetrics.utilities import dim_zero_cat

from skinet.metrics.threshold_counts import (
    SELECTIONS,
    compare_dtype,
    compute_threshold_counts,
    safe_ratio,
    select_threshold,
    with_reference,
)

THRESHOLDS: Tensor = torch.linspace(1.0, 0.0, 51)
"""The 51 candidate thresholds, descending from 1.0 to 0.0 in steps of 0.02 (float32)."""

_REFERENCE_THRESHOLD = 0.5  # the plain cutoff that ``dice_threshold_gain`` is measured against


@dataclass
class ThresholdResult:
    """Outcome of a threshold sweep; every field is a tensor on the input's device.

    Attributes:
        best_dice: Dataset-aggregated Dice at ``optimal_threshold`` (scalar).
        optimal_threshold: The chosen threshold (scalar), or the fixed one when the sweep is off.
        dice_at_05: Dataset-aggregated Dice at threshold 0.5 (scalar).
        dice_threshold_gain: ``best_dice - dice_at_05`` (scalar).
        mean_dice_per_image: Mean over images of per-image Dice at ``optimal_threshold``.
        mean_iou_per_image: Mean over images of per-image IoU at ``optimal_threshold``.
        dice_per_threshold: Dataset Dice for each candidate, shape ``(T,)``.
        thresholds: The candidates, descending, shape ``(T,)``.
    """

    best_dice: Tensor
    optimal_threshold: Tensor
    dice_at_05: Tensor
    dice_threshold_gain: Tensor
    mean_dice_per_image: Tensor
    mean_iou_per_image: Tensor
    dice_per_threshold: Tensor
    thresholds: Tensor

    def scalars(self) -> dict[str, Tensor]:
        """The scalar fields by name, ready for ``self.log_dict`` under stage-specific keys."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name not in _PER_THRESHOLD}

    def cpu(self) -> ThresholdResult:
        """A detached copy on the CPU (to keep after the epoch, e.g. for plots)."""
        return ThresholdResult(
            **{f.name: getattr(self, f.name).detach().cpu() for f in fields(self)}
        )


_PER_THRESHOLD = ("dice_per_threshold", "thresholds")


def _check_thresholds(thresholds: Tensor) -> Tensor:
    thresholds = torch.as_tensor(thresholds, dtype=torch.float32)
    if thresholds.ndim != 1 or thresholds.numel() == 0:
        raise ValueError(f"thresholds must be non-empty and 1-D, got {tuple(thresholds.shape)}")
    if not bool(((thresholds >= 0) & (thresholds <= 1)).all()):
        raise ValueError("thresholds must lie in [0, 1]")
    if not bool((thresholds[1:] < thresholds[:-1]).all()):
        raise ValueError("thresholds must be strictly descending, e.g. torch.linspace(1, 0, 51)")
    return thresholds


def _flatten_images(probs: Tensor, masks: Tensor, validate: bool = True) -> tuple[Tensor, Tensor]:
    """``(B, 1, H, W)`` or ``(B, H, W)`` probs and masks -> ``(B, H*W)`` probs and bool masks."""
    if probs.ndim == 4 and probs.shape[1] == 1:
        probs = probs[:, 0]
    if masks.ndim == 4 and masks.shape[1] == 1:
        masks = masks[:, 0]
    if probs.ndim != 3 or probs.shape != masks.shape:
        raise ValueError(
            "probs and masks must be (B, 1, H, W) or (B, H, W) with matching shapes, got "
            f"{tuple(probs.shape)} and {tuple(masks.shape)}"
        )
    if not probs.is_floating_point():
        raise ValueError(f"probs must be floating point, got {probs.dtype}")
    if validate and probs.numel():
        # One pass; a NaN propagates into aminmax and fails both comparisons.
        low, high = torch.aminmax(probs)
        if not bool((low >= 0) & (high <= 1)):
            raise ValueError("probs must lie in [0, 1]; apply sigmoid to the logits first")
    masks = masks if masks.dtype == torch.bool else masks > 0.5
    return probs.flatten(1), masks.flatten(1)


def _float_dtype(device: torch.device) -> torch.dtype:
    return torch.float32 if device.type == "mps" else torch.float64  # MPS has no float64


def _summarise(
    thresholds: Tensor,
    counts: Tensor,
    per_image: Tensor,
    counts_05: Tensor,
    best: int | None,
    selection: str = "pooled_dice",
    reference: float | None = None,
) -> ThresholdResult:
    """Build the result from integer counts; both implementations end here, so they agree.

    Args:
        thresholds: Candidates, descending, ``(T,)``.
        counts: Dataset ``[tp, fp, fn]`` per candidate, ``(T, 3)`` int64.
        per_image: Per-image ``[tp, fp, fn]`` per candidate, ``(N, T, 3)`` int64.
        counts_05: Dataset ``[tp, fp, fn]`` at 0.5, ``(3,)`` int64.
        best: Index of the candidate to report, or ``None`` to select one.
        selection, reference: How to select (:func:`select_threshold`).
    """
    dtype = _float_dtype(counts.device)
    tp, fp, fn = counts.unbind(-1)
    dice = safe_ratio(2 * tp, 2 * tp + fp + fn, dtype)
    idx = (
        select_threshold(dice, per_image, thresholds, selection, reference)
        if best is None
        else best
    )
    tp05, fp05, fn05 = counts_05.unbind(-1)
    dice_05 = safe_ratio(2 * tp05, 2 * tp05 + fp05 + fn05, dtype)
    img_tp, img_fp, img_fn = per_image[:, idx].unbind(-1)
    img_dice = safe_ratio(2 * img_tp, 2 * img_tp + img_fp + img_fn, dtype)
    img_iou = safe_ratio(img_tp, img_tp + img_fp + img_fn, dtype)
    return ThresholdResult(
        best_dice=dice[idx].float(),
        optimal_threshold=thresholds[idx].clone(),
        dice_at_05=dice_05.float(),
        dice_threshold_gain=(dice[idx] - dice_05).float(),
        mean_dice_per_image=img_dice.mean().float(),
        mean_iou_per_image=img_iou.mean().float(),
        dice_per_threshold=dice.float(),
        thresholds=thresholds.clone(),
    )


def find_best_threshold(
    probs: Tensor, masks: Tensor, thresholds: Tensor | None = None
) -> ThresholdResult:
    """Reference sweep: one broadcast of ``probs >= t`` over the whole set for every threshold.

    Materialises a ``(T, N, H*W)`` bool tensor, so memory grows with ``T`` times the set; use
    :class:`ThresholdSweep` during training. See the module docstring for the conventions.

    Args:
        probs: Foreground probabilities in ``[0, 1]``, ``(N, 1, H, W)`` or ``(N, H, W)``.
        masks: Binary masks of the same shape.
        thresholds: Strictly descending candidates in ``[0, 1]``; :data:`THRESHOLDS` if ``None``.

    Returns:
        The :class:`ThresholdResult` at the Dice-maximising threshold (highest on ties).
    """
    thresholds = _check_thresholds(THRESHOLDS if thresholds is None else thresholds)
    probs, masks = _flatten_images(probs, masks)
    if probs.shape[0] == 0:
        raise ValueError("find_best_threshold needs at least one image")
    thresholds = thresholds.to(probs.device)
    dtype = compare_dtype(probs)
    probs = probs.to(dtype)

    def broadcast_counts(t: Tensor) -> Tensor:  # (T,) -> (N, T, 3) per-image [tp, fp, fn]
        preds = probs[None] >= t.to(dtype)[:, None, None]  # (T, N, P)
        tp = (preds & masks).sum(-1)
        fp = preds.sum(-1) - tp
        fn = masks.sum(-1) - tp
        return torch.stack([tp, fp, fn], dim=-1).transpose(0, 1)

    per_image = broadcast_counts(thresholds)
    half = torch.tensor([_REFERENCE_THRESHOLD], device=probs.device)
    counts_05 = broadcast_counts(half).sum(0)[0]
    return _summarise(thresholds, per_image.sum(0), per_image, counts_05, best=None)


class ThresholdSweep(Metric):
    """Streaming, DDP-safe equivalent of :func:`find_best_threshold`.

    ``update(probs, masks)`` takes probabilities in ``[0, 1]`` and binary masks, both
    ``(B, 1, H, W)`` or ``(B, H, W)``; ``compute()`` returns a :class:`ThresholdResult` equal
    (``==``) to :func:`find_best_threshold` on the concatenated batches. States are integer
    counts on a grid of the candidates plus 0.5: dataset ``tp/fp/fn`` per threshold summed
    across processes, and per-image ``(B, T, 3)`` counts concatenated across processes for the
    per-image means. Memory per batch is ``O(B·H·W)``, independent of the number of thresholds.

    Empty convention: an image whose mask and prediction are both empty scores Dice 1 and IoU 1;
    an empty mask with a non-empty prediction scores 0.

    Args:
        thresholds: Strictly descending candidates in ``[0, 1]``; :data:`THRESHOLDS` if ``None``.
        fixed_threshold: Skip the sweep and report everything at this threshold in ``[0, 1]``
            (``optimal_threshold`` echoes it; the gain is still relative to 0.5).
        selection: How the threshold is chosen (:func:`select_threshold`).
        reference: The threshold ``guarded`` keeps unless the gain is clear; added to the
            candidates when it is not one of them.
        validate_args: Check that ``probs`` lies in ``[0, 1]`` on every update (one device sync).
        kwargs: Forwarded to :class:`torchmetrics.Metric`.
    """

    is_differentiable = False
    higher_is_better = True
    full_state_update = False

    tp: Tensor
    fp: Tensor
    fn: Tensor
    per_image: list[Tensor]
    grid: Tensor
    candidate_index: Tensor

    def __init__(
        self,
        thresholds: Tensor | None = None,
        fixed_threshold: float | None = None,
        validate_args: bool = True,
        selection: str = "pooled_dice",
        reference: float | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if selection not in SELECTIONS:
            raise ValueError(f"selection must be one of {SELECTIONS}, got {selection!r}")
        if selection == "guarded" and fixed_threshold is None and reference is None:
            raise ValueError("the guarded selection needs a reference threshold")
        self.selection, self.reference = selection, reference
        if fixed_threshold is not None:
            if thresholds is not None:
                raise ValueError("pass either thresholds or fixed_threshold, not both")
            if not (math.isfinite(fixed_threshold) and 0.0 <= fixed_threshold <= 1.0):
                raise ValueError(f"fixed_threshold must be in [0, 1], got {fixed_threshold}")
            candidates = torch.tensor([fixed_threshold], dtype=torch.float32)
        else:
            candidates = _check_thresholds(THRESHOLDS if thresholds is None else thresholds)
            candidates = with_reference(candidates, reference if selection == "guarded" else None)
        self.fixed_threshold = fixed_threshold
        self.validate_args = validate_args
        # Count on candidates ∪ {0.5} so the gain over 0.5 needs no second pass.
        half = torch.tensor([_REFERENCE_THRESHOLD], dtype=torch.float32)
        grid = torch.unique(torch.cat([candidates, half])).flip(0)
        self.register_buffer("grid", grid, persistent=False)
        self.register_buffer(
            "candidate_index", torch.searchsorted(-grid, -candidates), persistent=False
        )
        self.index_05 = int(torch.searchsorted(-grid, -half))
        num_grid = grid.numel()
        for name in ("tp", "fp", "fn"):
            self.add_state(
                name, default=torch.zeros(num_grid, dtype=torch.long), dist_reduce_fx="sum"
            )
        self.add_state("per_image", default=[], dist_reduce_fx="cat")

    def _wrap_compute(self, compute: Callable[..., Any]) -> Callable[..., Any]:
        # torchmetrics squeezes every one-element output; with a single candidate (fixed mode)
        # that would turn the per-threshold fields 0-dim, so restore their (T,) shape.
        wrapped = super()._wrap_compute(compute)

        @functools.wraps(compute)
        def keep_per_threshold_1d(*args: Any, **kwargs: Any) -> ThresholdResult:
            result: ThresholdResult = wrapped(*args, **kwargs)
            for name in _PER_THRESHOLD:
                setattr(result, name, getattr(result, name).reshape(-1))
            return result

        return keep_per_threshold_1d

    def update(self, probs: Tensor, masks: Tensor) -> None:
        """Accumulate the counts of one batch (see the class docstring for shapes)."""
        probs, masks = _flatten_images(probs, masks, validate=self.validate_args)
        counts = compute_threshold_counts(probs, masks, self.grid)
        total = counts.sum(0)
        self.tp += total[:, 0]
        self.fp += total[:, 1]
        self.fn += total[:, 2]
        self.per_image.append(counts)

    def compute(self) -> ThresholdResult:
        """The sweep result over everything seen since the last ``reset()``."""
        if isinstance(self.per_image, list) and not self.per_image:
            raise RuntimeError("ThresholdSweep.compute() called before any update()")
        per_image = dim_zero_cat(self.per_image)
        counts = torch.stack([self.tp, self.fp, self.fn], dim=-1)
        idx = self.candidate_index
        return _summarise(
            self.grid[idx],
            counts[idx],
            per_image[:, idx],
            counts[self.index_05],
            best=0 if self.fixed_threshold is not None else None,
            selection=self.selection,
            reference=self.reference,
        )
