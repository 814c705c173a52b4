"""The probability threshold a model predicts with, and where it came from.

One value object, :class:`Threshold`, is made once from a checkpoint
(:attr:`skinet.checkpoints.format.CheckpointPayload.threshold_choice`) or from the user's
``--threshold``; the predictor, the ensemble, the export sidecar, the model card and
``predictions.json`` all read it. The order in which a checkpoint's records decide it:

1. ``calibrated``: tuned on one's own labelled images (``skinet evaluate --tune-threshold
   --save-calibrated``);
2. ``fixed``: ``TRAIN_CONFIG.optimal_threshold`` fixed it in training (or ``--threshold`` was
   given, ``set_by`` says which);
3. ``validation sweep``: the threshold the training run chose on its validation set;
4. ``default``: :data:`DEFAULT_THRESHOLD` when the checkpoint records none.

An ensemble's threshold is ``ensemble mean``: the mean of its members' (:func:`ensemble_mean`),
except a ``skinet cv`` folder's, ``out-of-fold``: chosen on the out-of-fold probabilities of
every training image (:func:`out_of_fold_threshold`).
This module imports neither torch nor Lightning.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

DEFAULT_THRESHOLD = 0.5
"""Probability threshold when a checkpoint records none."""

ThresholdSource = Literal[
    "calibrated", "fixed", "validation sweep", "default", "ensemble mean", "out-of-fold"
]
GIVEN = "--threshold"
"""``Threshold.set_by`` of a threshold the user gave."""
TRAIN_FIXED = "TRAIN_CONFIG.optimal_threshold"
"""``Threshold.set_by`` of a threshold fixed in the training config."""
TUNING_RECORD_KEYS = (
    "tuned_on",
    "num_images",
    "selection",
    "source_checkpoint",
    "source_threshold",
    "created",
    "tta",
    "tta_gain",
    "tta_interval",
    "threshold_without_tta",
    "threshold_with_tta",
    "without_tta",
    "with_tta",
)
"""What the JSON records keep of a tuned threshold's record (``Threshold.calibration``)."""


@dataclass(frozen=True)
class Threshold:
    """A pixel is lesion iff ``probability >= value``; ``source`` says why this value.

    Attributes:
        value: The threshold in ``[0, 1]``.
        source: ``calibrated``, ``fixed``, ``validation sweep``, ``default``,
            ``ensemble mean`` or ``out-of-fold`` (see the module docs).
        set_by: For ``fixed``: ``--threshold`` or ``TRAIN_CONFIG.optimal_threshold``.
        calibration: For ``calibrated`` and ``out-of-fold``: how it was tuned (``tuned_on``,
            ``num_images``, ``selection``, ``source_threshold``, ...).
        members: For ``ensemble mean`` and ``out-of-fold``: each member's threshold.
        selection: For ``validation sweep``: the run's rule (``TRAIN_CONFIG.threshold_selection``;
            ``None`` for a run that recorded none, which chose by pooled Dice).
        reference: For ``validation sweep`` under ``guarded``: the threshold the sweep had to
            beat clearly (``TRAIN_CONFIG.threshold_reference``; a fine-tuning run's source's).
    """

    value: float
    source: ThresholdSource
    set_by: str | None = None
    calibration: Mapping[str, Any] | None = field(default=None, hash=False)
    members: tuple[Threshold, ...] = ()
    selection: str | None = None
    reference: float | None = None

    def __post_init__(self) -> None:
        if not 0.0 <= self.value <= 1.0:
            raise ValueError(f"threshold must be in [0, 1], got {self.value}")

    @classmethod
    def given(cls, value: float) -> Threshold:
        """A threshold the user gave (``--threshold``, or ``Predictor(threshold=...)``)."""
        return cls(float(value), "fixed", set_by=GIVEN)

    @property
    def tta(self) -> bool:
        """Whether the tuning behind this threshold chose flips at prediction time
        (``skinet evaluate --tune-tta``, ``skinet cv --tune-tta``): it was tuned on flipped
        maps, and predicting follows unless told otherwise (``--no-tta``)."""
        return bool((self.calibration or {}).get("tta", False))

    @property
    def origin(self) -> str:
        """Where the value came from, in words (without the value)."""
        if self.source == "calibrated":
            calibration = self.calibration or {}
            where = calibration.get("tuned_on", "labelled images")
            count = calibration.get("num_images", "?")
            return f"calibrated on {where}, {count} images{self._flips}{self._without}"
        if self.source == "fixed":
            return GIVEN if self.set_by == GIVEN else "fixed by the checkpoint's TRAIN_CONFIG"
        if self.source == "validation sweep":
            return self._swept
        if self.source == "ensemble mean":
            values = ", ".join(f"{member.value:.3f}" for member in self.members)
            return f"mean of the members' thresholds ({values}){self._members_other_way}"
        if self.source == "out-of-fold":
            calibration = self.calibration or {}
            return (
                f"chosen on the {calibration.get('num_images', '?')} out-of-fold images of the "
                f"cross-validation, {calibration.get('selection', 'pooled_dice')}{self._flips}"
                f"{self._without}"
            )
        return "the default: the checkpoint records none"

    @property
    def _swept(self) -> str:
        if self.selection == "guarded" and self.reference is not None:
            if math.isclose(self.value, self.reference, abs_tol=1e-6):
                return (
                    "the checkpoint's validation sweep kept its threshold_reference: guarded, "
                    "no clear gain on its validation images"
                )
            return (
                "the checkpoint's validation-optimal one by mean per-image Jaccard: guarded, a "
                f"clear gain over its threshold_reference {self.reference:.3f}"
            )
        if self.selection in ("per_image", "guarded"):
            return "the checkpoint's validation-optimal one by mean per-image Jaccard"
        return "the checkpoint's validation-optimal one"

    @property
    def _flips(self) -> str:
        return ", tuned with flips" if self.tta else ""

    @property
    def _without(self) -> str:
        calibration = self.calibration or {}
        if calibration.get("without_tta"):
            return ", without the flips it chose"
        if calibration.get("with_tta"):
            return ", tuned with the flips it did not choose"
        return ""

    @property
    def _members_other_way(self) -> str:
        notes = {
            "without_tta": "a member calibrated with flips brings its threshold tuned without them",
            "with_tta": "a member calibrated without flips brings its threshold tuned with them",
        }
        return "".join(
            f"; {note}"
            for mark, note in notes.items()
            if any((member.calibration or {}).get(mark) for member in self.members)
        )

    def describe(self) -> str:
        """One line for the log: ``threshold 0.460 (calibrated on ..., 12 images)``."""
        if self.source in ("ensemble mean", "out-of-fold"):
            return (
                f"ensemble of {len(self.members)} models, threshold {self.value:.3f} "
                f"= {self.origin}"
            )
        return f"threshold {self.value:.3f} ({self.origin})"

    def to_dict(self) -> dict[str, Any]:
        """Plain data for JSON records (``predictions.json``, the export sidecar)."""
        data: dict[str, Any] = {"value": self.value, "source": self.source}
        if self.set_by is not None:
            data["set_by"] = self.set_by
        if self.calibration is not None:
            kept = (k for k in TUNING_RECORD_KEYS if k in self.calibration)
            data["calibration"] = {k: self.calibration[k] for k in kept}
        if self.members:
            data["members"] = [member.to_dict() for member in self.members]
        if self.selection is not None:
            data["selection"] = self.selection
        if self.reference is not None:
            data["reference"] = self.reference
        return data


def trained_threshold(
    fixed: float | None,
    swept: float | None,
    used: float | None = None,
    selection: str | None = None,
    reference: float | None = None,
) -> Threshold:
    """The threshold a training run left.

    Args:
        fixed: ``TRAIN_CONFIG.optimal_threshold`` (names the source ``fixed`` when set).
        swept: The threshold the run chose on its validation set (``val_optimal_threshold``).
        used: The threshold the run applied last (a run without a finished validation applied
            :data:`DEFAULT_THRESHOLD`, or ``fixed``).
        selection: ``TRAIN_CONFIG.threshold_selection``, the rule that chose ``swept``.
        reference: ``TRAIN_CONFIG.threshold_reference``, what ``guarded`` measured against.
    """
    value = next((v for v in (swept, used, fixed) if v is not None), None)
    if fixed is not None:
        return Threshold(float(fixed if value is None else value), "fixed", set_by=TRAIN_FIXED)
    if swept is not None:
        guarded = reference if selection == "guarded" else None
        return Threshold(
            float(swept),
            "validation sweep",
            selection=selection,
            reference=None if guarded is None else float(guarded),
        )
    return Threshold(DEFAULT_THRESHOLD if value is None else float(value), "default")


def calibrated_threshold(calibration: Mapping[str, Any]) -> Threshold:
    """The threshold of a calibration record (``calibration["threshold"]``)."""
    return Threshold(float(calibration["threshold"]), "calibrated", calibration=calibration)


def ensemble_mean(members: Sequence[Threshold]) -> Threshold:
    """An ensemble's threshold: the mean of its members' (one member: its own).

    Raises:
        ValueError: ``members`` is empty.
    """
    if not members:
        raise ValueError("an ensemble needs at least one member threshold")
    if len(members) == 1:
        return members[0]
    mean = statistics.fmean(member.value for member in members)
    return Threshold(mean, "ensemble mean", members=tuple(members))


ENSEMBLE_THRESHOLD = "ensemble_threshold"
"""The key of a ``skinet cv`` folder's ``cv_results.json`` that records its threshold."""


def out_of_fold_threshold(record: Mapping[str, Any], members: Sequence[Threshold]) -> Threshold:
    """A ``skinet cv`` folder's threshold: its ``cv_results.json`` :data:`ENSEMBLE_THRESHOLD`
    record (``value``, ``selection``, ``num_images``, ``tuned_on``; with ``skinet cv
    --tune-tta`` also ``tta``, ``tta_gain`` and ``tta_interval``), the folds' own as members."""
    return Threshold(
        float(record["value"]), "out-of-fold", calibration=dict(record), members=tuple(members)
    )


OTHER_WAY = {True: "with_tta", False: "without_tta"}
"""The record's mark of a threshold taken from the way its tuning did not choose, by ``tta``."""


def for_flips(chosen: Threshold, tta: bool) -> Threshold:
    """The threshold to predict at with flips (``tta``) or without them.

    A tuning that decided flips (``skinet evaluate --tune-tta``'s calibration, ``skinet cv
    --tune-tta``'s folder) kept the threshold the same images chose each way
    (``threshold_with_tta``, ``threshold_without_tta``): predicting the other way than it chose
    (``--no-tta`` on a choice of flips, ``--tta`` on a choice without) takes that way's value.
    ``chosen`` itself when it predicts the way it was tuned, was not tuned on one's own images,
    or its record lacks the other way's value (a calibration made before both were kept, or
    calibrated again with the flips it carried).
    """
    record = chosen.calibration or {}
    other = record.get("threshold_with_tta" if tta else "threshold_without_tta")
    tuned = chosen.source in ("calibrated", "out-of-fold")
    tuned_with_flips = chosen.tta or bool(record.get(OTHER_WAY[True]))
    if not tuned or tuned_with_flips == tta or not isinstance(other, int | float):
        return chosen
    measured_the_chosen_way = ("pooled_dice", "mean_jaccard", *OTHER_WAY.values())
    kept = {
        key: value
        for key, value in record.items()
        if not key.startswith("tta") and key not in measured_the_chosen_way
    }
    key = "threshold" if chosen.source == "calibrated" else "value"
    kept.update({key: float(other), OTHER_WAY[tta]: True})
    return Threshold(float(other), chosen.source, calibration=kept, members=chosen.members)


RECORD_DIGITS = 6
"""Decimals of thresholds in the JSON records people read (``predictions.json``,
``summary.json``): a float32 0.44 reads 0.44, not 0.4399999976158142. Masks are made with the
unrounded value."""


def rounded(value: Any, digits: int = RECORD_DIGITS) -> Any:
    """``value`` with every float in it rounded to ``digits`` decimals (for a JSON record)."""
    if isinstance(value, float):
        return round(value, digits)
    if isinstance(value, Mapping):
        return {key: rounded(item, digits) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [rounded(item, digits) for item in value]
    return value
