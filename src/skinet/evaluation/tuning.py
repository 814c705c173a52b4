"""``skinet evaluate --tune-threshold``: the Dice-optimal threshold of a model on one split."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from skinet.datasets.layouts import Sample
from skinet.imaging.decode import read_image, read_mask
from skinet.inference.predictor import Predictor
from skinet.metrics.thresholds import THRESHOLDS, compute_threshold_counts


@dataclass(frozen=True)
class TunedThreshold:
    """The threshold maximising the split's pooled Dice (before post-processing)."""

    threshold: float
    dice: float
    num_images: int


def tune_threshold(predictor: Predictor, samples: Sequence[Sample]) -> TunedThreshold:
    """Sweep :data:`THRESHOLDS` over every image's probabilities; the highest on ties wins.

    tp/fp/fn are summed over all pixels of the split (as in training's threshold sweep), on
    each image at its own resolution.
    """
    totals = torch.zeros(THRESHOLDS.numel(), 3, dtype=torch.int64)
    for start in range(0, len(samples), predictor.batch_size):
        chunk = samples[start : start + predictor.batch_size]
        images = [read_image(s.image_path) for s in chunk]
        probs = predictor.predict_proba_batch(images)
        for prob, sample in zip(probs, chunk, strict=True):
            target = torch.from_numpy(read_mask(sample.mask_path)).bool().flatten()[None]
            counts = compute_threshold_counts(
                torch.from_numpy(prob).flatten()[None], target, THRESHOLDS
            )
            totals += counts[0]
    tp, fp, fn = totals.unbind(-1)
    dice = (2 * tp).double() / (2 * tp + fp + fn).clamp(min=1).double()
    # THRESHOLDS is descending: the first maximum is the highest threshold among ties.
    best = int(torch.argmax(dice))
    return TunedThreshold(float(THRESHOLDS[best]), float(dice[best]), len(samples))
