"""``skinet evaluate --tune-threshold``: a model's threshold chosen on labelled images by the
training sweep itself (:class:`skinet.metrics.thresholds.ThresholdSweep`): the same counts, the
same Dice (1 where mask and prediction are both empty), the same rule and ties."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torchmetrics.utilities import dim_zero_cat

from skinet.checkpoints.threshold import Threshold
from skinet.datasets.layouts import Sample
from skinet.evaluation.evaluate import UnscorableImage, read_labelled
from skinet.imaging.errors import DatasetError
from skinet.inference.predictor import Predictor
from skinet.metrics.threshold_counts import guard_interval, is_clear_gain, per_image_jaccard
from skinet.metrics.thresholds import ThresholdSweep

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
    per_image_jaccard: tuple[float, ...] = field(default=(), repr=False)
    """Each image's Jaccard at ``threshold``, in the order the images were given."""

    @property
    def kept_reference(self) -> bool:
        return self.reference is not None and self.threshold == self.reference

    def as_threshold(self, tuned_on: str) -> Threshold:
        """The tuned value as the predictor's :class:`Threshold` (source ``calibrated``)."""
        record = {"threshold": self.threshold, "tuned_on": tuned_on}
        record.update(num_images=self.num_images, pooled_dice=self.dice)
        return Threshold(self.threshold, "calibrated", calibration=record)


class MapTuner:
    """The training sweep fed one ``(probabilities, mask)`` pair at a time, of any sizes; its
    :meth:`result` is what :func:`tune_on_maps` returns for the same pairs.

    Args:
        selection: ``pooled_dice``, ``per_image`` or ``guarded`` (see
            :func:`~skinet.metrics.threshold_counts.select_threshold`).
        reference: What ``guarded`` keeps unless the gain is clear (the checkpoint's own).
    """

    def __init__(self, selection: str = "pooled_dice", reference: float | None = None) -> None:
        self.selection = selection
        self.reference = reference if selection == "guarded" else None
        self._sweep = ThresholdSweep(selection=selection, reference=self.reference)
        self.count = 0

    def update(self, probs: np.ndarray, mask: np.ndarray) -> None:
        """Add one image: float probabilities ``(H, W)`` in ``[0, 1]``, a mask (lesion ``> 0``)."""
        target = torch.from_numpy(np.asarray(mask) > 0)[None]
        self._sweep.update(torch.from_numpy(np.asarray(probs))[None], target)
        self.count += 1

    def result(self) -> TunedThreshold:
        """The chosen threshold. Raises ``ValueError`` when no image was added."""
        if self.count == 0:
            raise ValueError("tuning the threshold needs at least one labelled image")
        swept = self._sweep.compute()
        chosen = self._sweep.grid == swept.optimal_threshold.to(self._sweep.grid.dtype)
        counts = dim_zero_cat(self._sweep.per_image)[:, int(torch.nonzero(chosen)[0])]
        return TunedThreshold(
            threshold=float(swept.optimal_threshold),
            dice=float(swept.best_dice),
            num_images=self.count,
            selection=self.selection,
            mean_jaccard=float(swept.mean_iou_per_image),
            reference=self.reference,
            per_image_jaccard=tuple(per_image_jaccard(counts[:, None])[:, 0].tolist()),
        )


def tune_on_maps(
    maps: Iterable[tuple[np.ndarray, np.ndarray]],
    selection: str = "pooled_dice",
    reference: float | None = None,
) -> TunedThreshold:
    """The threshold the training sweep chooses on ``(probabilities, mask)`` pairs of any sizes.

    Args:
        maps: Per image, float probabilities ``(H, W)`` in ``[0, 1]`` and a mask ``(H, W)``
            (foreground where ``> 0``).
        selection, reference: As :class:`MapTuner`.

    Raises:
        ValueError: ``maps`` is empty.
    """
    tuner = MapTuner(selection, reference)
    for probs, mask in maps:
        tuner.update(probs, mask)
    return tuner.result()


def tune_threshold(
    predictor: Predictor,
    samples: Sequence[Sample],
    selection: str = "pooled_dice",
    reference: float | None = None,
) -> TunedThreshold:
    """Sweep the candidate thresholds over every image's probabilities at its own resolution
    and choose as the training sweep does (:func:`tune_on_maps`; ties go to the highest).

    Args:
        predictor: The model (its post-processing is not applied while tuning).
        samples: Labelled images; those evaluation counts as failures
            (:func:`~skinet.evaluation.evaluate.read_labelled`) are left out and listed in
            ``failures``.
        selection, reference: As :func:`tune_on_maps`.

    Raises:
        DatasetError: no image could be read.
    """
    return _tune_ways(predictor, samples, (predictor.tta,), selection, (reference,))[0]


def _tune_ways(
    predictor: Predictor,
    samples: Sequence[Sample],
    ways: Sequence[bool],
    selection: str,
    references: Sequence[float | None],
) -> list[TunedThreshold]:
    """:func:`tune_threshold` once per way of predicting (``tta`` off or on), each with its
    ``references`` entry, in one pass over the images: each is read and preprocessed once.
    ``predictor.tta`` is not changed."""
    tuners = [MapTuner(selection, reference) for reference in references]
    failures = feed_ways(predictor, samples, ways, tuners)
    try:
        tuned = [dataclasses.replace(tuner.result(), failures=failures) for tuner in tuners]
    except ValueError as error:
        raise DatasetError(
            f"no image of the {len(samples)} given could be read to tune on"
        ) from error
    if failures:
        log.warning(
            "tuning the threshold without %d image(s) that cannot be scored: %s",
            len(failures),
            "; ".join(f"{i}: {why}" for i, why in list(failures.items())[:3]),
        )
    return tuned


def feed_ways(
    predictor: Predictor,
    samples: Sequence[Sample],
    ways: Sequence[bool],
    tuners: Sequence[MapTuner],
) -> dict[str, str]:
    """Feed each of ``tuners`` every sample's probabilities predicted its way (``tta`` off or
    on, ``ways`` in the same order), reading and preprocessing each image once; the images
    left out (:func:`~skinet.evaluation.evaluate.read_labelled`), with the reason."""
    failures: dict[str, str] = {}
    for start in range(0, len(samples), predictor.batch_size):
        pairs = []
        for sample in samples[start : start + predictor.batch_size]:
            try:
                pairs.append(read_labelled(sample))
            except UnscorableImage as error:  # a failure in the evaluation's reports too
                failures[sample.id] = str(error)
        if not pairs:
            continue
        maps = predictor.predict_proba_ways([image for image, _ in pairs], ways)
        for tta, tuner in zip(ways, tuners, strict=True):
            for prob, (_, mask) in zip(maps[tta], pairs, strict=True):
                tuner.update(prob, mask)
    return failures


@dataclass(frozen=True)
class FlipChoice:
    """Whether flips at prediction time (``--tta``) pay on the tuning images.

    ``plain`` and ``flipped`` are the threshold tuned without and with flips, each by the same
    rule; ``gain`` is flips' mean per-image Jaccard gain, each way at its own threshold, with its
    95% paired bootstrap ``interval`` over the images. Flips are used only when the gain is
    clear, by the ``guarded`` threshold rule's test
    (:func:`~skinet.metrics.threshold_counts.is_clear_gain`: the lower end above 0, on at least
    six images): 20-50 images rarely justify 4x the compute.
    """

    use: bool
    gain: float
    interval: tuple[float, float]
    plain: TunedThreshold
    flipped: TunedThreshold

    @property
    def tuned(self) -> TunedThreshold:
        """The threshold tuned the way that was chosen."""
        return self.flipped if self.use else self.plain

    def record(self) -> dict[str, Any]:
        """What a calibrated checkpoint or a cv record keeps of the choice (plain data): the
        choice, its gain and interval, and the threshold of each way (``--no-tta`` predicts at
        ``threshold_without_tta``)."""
        return {
            "tta": self.use,
            "tta_gain": self.gain,
            "tta_interval": list(self.interval),
            "threshold_without_tta": self.plain.threshold,
            "threshold_with_tta": self.flipped.threshold,
        }


def choose_flips(
    predictor: Predictor,
    samples: Sequence[Sample],
    selection: str = "pooled_dice",
    reference: float | tuple[float, float] | None = None,
) -> FlipChoice:
    """Tune the threshold on ``samples`` without and with flips (:func:`tune_threshold`, both in
    one pass over the images) and keep flips only when their gain is clear
    (:class:`FlipChoice`). ``reference``: what ``guarded`` keeps, one for both ways or one
    per way (without flips, with them: a calibration that kept each way's threshold).
    ``predictor.tta`` is not changed.

    Raises:
        DatasetError: no image could be read.
    """
    references = reference if isinstance(reference, tuple) else (reference, reference)
    plain, flipped = _tune_ways(predictor, samples, (False, True), selection, references)
    return judge_flips(plain, flipped)


def judge_flips(plain: TunedThreshold, flipped: TunedThreshold) -> FlipChoice:
    """:class:`FlipChoice` from the thresholds tuned without and with flips on the same images,
    in the same order (each image's Jaccard at its way's threshold, paired).

    Raises:
        ValueError: the two were tuned on different numbers of images.
    """
    if len(plain.per_image_jaccard) != len(flipped.per_image_jaccard):
        raise ValueError(
            f"flips are judged image by image: tuned on {len(plain.per_image_jaccard)} images "
            f"without them and on {len(flipped.per_image_jaccard)} with them"
        )
    plain_scores = torch.tensor(plain.per_image_jaccard, dtype=torch.float64)
    gain = torch.tensor(flipped.per_image_jaccard, dtype=torch.float64) - plain_scores
    return FlipChoice(is_clear_gain(gain), float(gain.mean()), guard_interval(gain), plain, flipped)
