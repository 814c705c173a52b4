"""``skinet evaluate --tune-threshold``: a model's threshold chosen on labelled images, by the
rule the training sweep uses (:func:`skinet.metrics.thresholds.select_threshold`)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from skinet.datasets.layouts import Sample
from skinet.evaluation.evaluate import UnscorableImage, read_labelled
from skinet.imaging.errors import DatasetError
from skinet.inference.predictor import Predictor
from skinet.metrics.thresholds import (
    THRESHOLDS,
    compute_threshold_counts,
    per_image_jaccard,
    pooled_dice,
    select_threshold,
    with_reference,
)

log = logging.getLogger(__name__)


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
    failures: dict[str, str] = field(default_factory=dict)
    """Images left out (unreadable, or of another size than their mask), with the reason."""

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
        samples: Labelled images; those evaluation counts as failures
            (:func:`~skinet.evaluation.evaluate.read_labelled`) are left out and listed in
            ``failures``.
        selection: ``pooled_dice``, ``per_image`` or ``guarded`` (see
            :func:`~skinet.metrics.thresholds.select_threshold`).
        reference: What ``guarded`` keeps unless the gain is clear (the checkpoint's own).
    """
    thresholds = with_reference(THRESHOLDS, reference if selection == "guarded" else None)
    counts, failures = [], {}
    for start in range(0, len(samples), predictor.batch_size):
        pairs = []
        for sample in samples[start : start + predictor.batch_size]:
            try:
                pairs.append(read_labelled(sample))
            except UnscorableImage as error:  # a failure in the evaluation's reports too
                failures[sample.id] = str(error)
        if not pairs:
            continue
        probs = predictor.predict_proba_batch([image for image, _ in pairs])
        for prob, (_, mask) in zip(probs, pairs, strict=True):
            target = torch.from_numpy(mask).bool().flatten()[None]
            prob_row = torch.from_numpy(prob).flatten()[None]
            counts.append(compute_threshold_counts(prob_row, target, thresholds)[0])
    if failures:
        log.warning(
            "tuning the threshold without %d image(s) that cannot be scored: %s",
            len(failures),
            "; ".join(f"{i}: {why}" for i, why in list(failures.items())[:3]),
        )
    if not counts:
        raise DatasetError(f"no image of the {len(samples)} given could be read to tune on")
    per_image = torch.stack(counts)
    dice = pooled_dice(per_image)
    best = select_threshold(dice, per_image, thresholds, selection, reference)
    return TunedThreshold(
        threshold=float(thresholds[best]),
        dice=float(dice[best]),
        num_images=len(counts),
        selection=selection,
        mean_jaccard=float(per_image_jaccard(per_image)[:, best].mean()),
        reference=reference if selection == "guarded" else None,
        failures=failures,
    )
