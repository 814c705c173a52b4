"""``skinet evaluate --tune-threshold``: a model's threshold chosen on labelled images, by the
rule the training sweep uses (:func:`skinet.metrics.thresholds.select_threshold`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from skinet.datasets.layouts import Sample
from skinet.imaging.decode import read_image, read_mask
from skinet.inference.predictor import Predictor
from skinet.metrics.thresholds import (
    THRESHOLDS,
    compute_threshold_counts,
    per_image_jaccard,
    pooled_dice,
    select_threshold,
    with_reference,
)


@dataclass(frozen=True)
class TunedThreshold:
    """The chosen threshold, its pooled Dice and mean per-image Jaccard (before
    post-processing), and how it was chosen."""

    threshold: float
    dice: float
    num_images: int
    selection: str = "pooled_dice"
    mean_jaccard: float | None = None
    reference: float | None = None
    """The threshold ``guarded`` kept unless the gain was clear."""

    @property
    def kept_reference(self) -> bool:
        return self.reference is not None and self.threshold == self.reference


def tune_threshold(
    predictor: Predictor,
    samples: Sequence[Sample],
    selection: str = "pooled_dice",
    reference: float | None = None,
) -> TunedThreshold:
    """Sweep :data:`THRESHOLDS` over every image's probabilities at its own resolution and
    choose as the training sweep does (``selection``; ties go to the highest threshold).

    Args:
        predictor: The model (its post-processing is not applied while tuning).
        samples: Labelled images.
        selection: ``pooled_dice``, ``per_image`` or ``guarded`` (see
            :func:`~skinet.metrics.thresholds.select_threshold`).
        reference: What ``guarded`` keeps unless the gain is clear (the checkpoint's own).
    """
    thresholds = with_reference(THRESHOLDS, reference if selection == "guarded" else None)
    counts = []
    for start in range(0, len(samples), predictor.batch_size):
        chunk = samples[start : start + predictor.batch_size]
        images = [read_image(s.image_path) for s in chunk]
        probs = predictor.predict_proba_batch(images)
        for prob, sample in zip(probs, chunk, strict=True):
            target = torch.from_numpy(read_mask(sample.mask_path)).bool().flatten()[None]
            prob_row = torch.from_numpy(prob).flatten()[None]
            counts.append(compute_threshold_counts(prob_row, target, thresholds)[0])
    per_image = torch.stack(counts)
    dice = pooled_dice(per_image)
    best = select_threshold(dice, per_image, thresholds, selection, reference)
    return TunedThreshold(
        threshold=float(thresholds[best]),
        dice=float(dice[best]),
        num_images=len(samples),
        selection=selection,
        mean_jaccard=float(per_image_jaccard(per_image)[:, best].mean()),
        reference=reference if selection == "guarded" else None,
    )
