"""A model card away from its run: the card of a calibrated copy (its threshold, its
``## Calibration`` section) and of an exported file, and finding a checkpoint's card.

The card itself is built by :mod:`skinet.checkpoints.model_card`; this module finds a checkpoint's
card and rewrites its lines for a copy of the checkpoint.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from skinet.checkpoints.model_card import (
    BESIDE,
    CHECKPOINT_LINE,
    EVALUATED_AT,
    MODEL_CARD_FILE,
    OUTPUT_LINE,
    card_figure,
    output_line,
)
from skinet.checkpoints.threshold import Threshold
from skinet.metrics.figures import signed

CALIBRATION_HEADING = "## Calibration"
_SOURCE_NOTE = re.compile(r" \(the source model's threshold; .*\):$")


def calibrate_card(
    text: str,
    threshold: Threshold,
    checkpoint: Path | None = None,
    source_run: Path | None = None,
) -> str:
    """A model card stating a calibrated ``threshold``: its output line names it, the evaluation
    says its figures are at the source model's threshold, and its ``## Calibration`` section
    (one only) says where it was tuned.

    With ``checkpoint`` (the calibrated file), the card's checkpoint line names it. A run's card
    points at ``splits.csv`` and ``config.yaml`` "beside this card"; the calibrated card names
    ``source_run``, the run folder that holds them, instead (the source run's, without it).
    """
    if threshold.calibration is None:
        raise ValueError("calibrate_card needs a calibrated threshold")
    where = f"in the source run folder `{source_run}`" if source_run else "of the source run"
    lines = []
    for line in moved_card(text.split(CALIBRATION_HEADING)[0], where).rstrip("\n").splitlines():
        if checkpoint is not None and line.startswith(CHECKPOINT_LINE):
            line, checkpoint = f"{CHECKPOINT_LINE}`{checkpoint}` (calibrated)", None
        if line.startswith(OUTPUT_LINE):
            line = output_line(threshold)
        elif EVALUATED_AT in line and line.endswith(":"):
            line = _SOURCE_NOTE.sub(":", line)[:-1] + (
                " (the source model's threshold; this calibrated copy predicts at "
                f"{card_figure(threshold.value)}, see Calibration):"
            )
        lines.append(line)
    if checkpoint is not None:  # a card without a checkpoint line
        lines += ["", f"{CHECKPOINT_LINE}`{checkpoint}` (calibrated)"]
    return "\n".join(lines) + "\n\n" + calibration_section(threshold.calibration) + "\n"


def checkpoint_card_path(path: Path) -> Path:
    """The card written beside a file: ``model.onnx`` -> ``model.onnx.MODEL_CARD.md``."""
    return path.with_name(path.name + "." + MODEL_CARD_FILE)


def moved_card(text: str, where: str) -> str:
    """A run's card away from its run folder: its ``splits.csv`` and ``config.yaml`` are
    ``where`` (``in the run folder `runs/x` ``) instead of "beside this card"."""
    return text.replace(BESIDE, where)


def find_checkpoint_card(checkpoint: Path) -> Path | None:
    """A checkpoint's own card: the one beside it (a calibrated copy's), else its run folder's."""
    source = checkpoint.resolve()
    for card in (checkpoint_card_path(source), source.parent.parent / MODEL_CARD_FILE):
        if card.is_file():
            return card
    return None


def calibration_section(calibration: Mapping[str, Any]) -> str:
    """The card's section on a threshold tuned on one's own images (``skinet evaluate``)."""
    dice = calibration.get("pooled_dice")
    dice_text = "" if dice is None else f", pooled Dice {dice:.4f} there"
    return "\n".join(
        [
            CALIBRATION_HEADING,
            "",
            f"- Threshold **{card_figure(calibration['threshold'])}**, tuned by `skinet evaluate "
            f"--tune-threshold{_selection(calibration)}` on `{calibration.get('tuned_on', 'n/a')}` "
            f"({calibration.get('num_images', 'n/a')} images{dice_text}), "
            f"{calibration.get('created', '')}.",
            f"- Calibrated from `{calibration.get('source_checkpoint', 'n/a')}`, whose own "
            f"threshold is {card_figure(calibration.get('source_threshold'))}; the weights are "
            "unchanged.",
            *_flips_lines(calibration),
            "- Scores on the images the threshold was tuned on are optimistic: check it with "
            "`skinet evaluate` on other labelled images of the same clinic.",
        ]
    )


def _selection(calibration: Mapping[str, Any]) -> str:
    """`` --threshold-selection RULE`` as the calibration recorded it (older ones did not)."""
    rule = calibration.get("selection")
    return f" --threshold-selection {rule}" if isinstance(rule, str) else ""


def _flips_lines(calibration: Mapping[str, Any]) -> list[str]:
    """The card's line on flips at prediction time, when ``--tune-tta`` decided them."""
    if "tta" not in calibration:
        return []
    gain = calibration.get("tta_gain")
    interval: Sequence[float] = calibration.get("tta_interval") or []
    figure = (
        f" (mean per-image Jaccard {signed(gain)} [{signed(interval[0])}, {signed(interval[1])}]"
        " on the tuning images)"
        if isinstance(gain, float) and len(interval) == 2
        else ""
    )
    if calibration["tta"]:
        why = f"chosen by `--tune-tta`{figure}" if figure else "as the threshold was tuned"
        off = _other_way(
            calibration.get("threshold_without_tta"),
            "`--no-tta` turns them off and predicts at {}, the threshold tuned without them",
            "`--no-tta` turns them off",
        )
        return [
            f"- Flips at prediction time **on**, {why}: predict, evaluate, robustness and compare "
            f"average four flipped views ({off}); an export is one view."
        ]
    on = _other_way(
        calibration.get("threshold_with_tta"),
        " `--tta` turns them on and predicts at {}, the threshold tuned with them.",
        "",
    )
    return [f"- Flips at prediction time off: `--tune-tta` found no clear gain{figure}.{on}"]


def _other_way(threshold: Any, sentence: str, unrecorded: str) -> str:
    """``sentence`` naming the threshold tuned the other way (with or without flips), or
    ``unrecorded`` where the calibration did not record one."""
    return (
        sentence.format(card_figure(threshold))
        if isinstance(threshold, int | float)
        else unrecorded
    )
