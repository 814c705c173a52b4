"""The tables of ``study_clinic.py``: every arm against its references, studies pooled by
source model (each source model one run, its arms resampled together)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import numpy as np

SOURCE, CALIBRATED = "source", "calibrated"
SHIPPED = "finetune"  # configs/clinic.yaml as it is
BLEND = "wise"
"""``wise_<arm>``: ``<arm>``'s fine-tuned weights interpolated with the source's."""
FLIPS = "flips"
"""``calibrated_flips``: the guarded calibration deciding flips as well (``--tune-tta``);
``source_flips``: the source model with flips on every image."""
TTA = "tta"
"""``tta_<kfold arm>``: ``<kfold arm>``'s folds predicting with flips as their cross-validation
chose them on the out-of-fold images (``skinet cv --tune-tta``), nothing retrained."""
DERIVED = {f"{CALIBRATED}_{FLIPS}": f"{CALIBRATED}_guarded"}
"""An arm tabled against the arm it adds one thing to."""


def blended_base(arm: str) -> str | None:
    """The arm that a ``wise_<arm>`` arm blends with the source (``None``: not a blend)."""
    return arm.removeprefix(f"{BLEND}_") if arm.startswith(f"{BLEND}_") else None


def flipped_base(arm: str) -> str | None:
    """The k-fold arm a ``tta_<arm>`` arm scores with its flips choice (``None``: not one)."""
    return arm.removeprefix(f"{TTA}_") if arm.startswith(f"{TTA}_") else None


def derived_from(arm: str) -> str | None:
    """The arm ``arm`` is tabled against besides the references: a blend's base, a k-fold
    arm's for the same folds with their flips choice, the guarded calibration for the one that
    decides flips too (``None``: none)."""
    return blended_base(arm) or flipped_base(arm) or DERIVED.get(arm)


def tables(
    studies: Sequence[dict[str, dict[str, dict[str, Any]]]], against: Sequence[str] = ()
) -> str:
    """The arms against ``source``, ``calibrated`` and ``finetune``, each ``wise_<arm>`` and
    ``tta_<arm>`` against ``<arm>`` and ``calibrated_flips`` against ``calibrated_guarded``,
    per source and over the sources. Several studies (another source model each, the same
    sources) are pooled: each source model is a run of every arm, and a run's arms are
    resampled together.
    Studies of one source model (the same ``source`` scores: another fine-tuning seed) are
    averaged per image into one run, so that no source model counts twice. ``against``: more
    arms to table every other arm against.

    Raises:
        ValueError: The studies share no source, or no arm, or an arm of ``against`` is not
            in every study.
    """
    from skinet.evaluation.compare import compare_scores, comparison_table

    sources, arms = _shared(studies)
    missing = [arm for arm in against if arm not in arms]
    if missing:
        raise ValueError(f"--against {missing}: not an arm of every study ({', '.join(arms)})")
    left_out = sorted(
        {f"{name}/{arm}" for study in studies for name in study for arm in study[name]}
        - {f"{name}/{arm}" for name in sources for arm in arms}
    )
    out = ["| source | arm | threshold | epochs (best) | check Jaccard |", "|---|---|---|---|---|"]
    for name in sources:
        for arm in arms:
            records = [study[name][arm] for study in studies]
            out.append(f"| {name} | {arm} | {_shown(records)} |")
    text = "\n".join(out) + "\n"
    runs = _by_source_model(studies, sources, arms)
    if len(studies) > 1:
        text += (
            f"\nOne value per study, in the order given; {len(studies)} studies of {len(runs)} "
            "source model(s), each source model one run below (its studies averaged per image).\n"
        )
    if left_out:
        text += f"\nLeft out, not in every study: {', '.join(left_out)}.\n"
    # The variants against the shipped fine-tuning too: is any of them a better recipe? And
    # each blend against the arm it blends: does interpolating with the source help it? (And
    # the calibration that decides flips against the one that does not.)
    references = {
        reference: [arm for arm in arms if arm != reference]
        for reference in (SOURCE, CALIBRATED, SHIPPED, *against)
        if reference in arms
    }
    for arm in arms:
        if (base := derived_from(arm)) in arms and arm not in references.setdefault(base, []):
            references[base].append(arm)
    for reference, others in references.items():
        order = [reference, *others]
        scores = {
            name: {arm: [run[name][arm] for run in runs] for arm in order} for name in sources
        }
        comparison = compare_scores(scores, paired_runs=len(runs) > 1)
        text += f"\n### Against {reference}\n\n" + comparison_table(comparison)
    return text


def _shared(studies: Sequence[dict[str, dict[str, Any]]]) -> tuple[list[str], list[str]]:
    """The sources of every study, and the arms every study ran on each of them.

    Raises:
        ValueError: The studies share no source, or no arm.
    """
    sources = [name for name in studies[0] if all(name in study for study in studies)]
    if not sources:
        raise ValueError("the studies share no source: pool studies of the same sources")
    arms = [
        arm
        for arm in studies[0][sources[0]]
        if all(arm in study[name] for study in studies for name in sources)
    ]
    if not arms:
        raise ValueError("the studies share no arm: pool studies of the same arms")
    return sources, arms


def _by_source_model(
    studies: Sequence[dict[str, dict[str, dict[str, Any]]]], sources: list[str], arms: list[str]
) -> list[dict[str, dict[str, dict[str, float]]]]:
    """Per source model, ``{source: {arm: per-image scores}}``, averaged over its studies."""
    groups: dict[str, list[dict[str, dict[str, dict[str, Any]]]]] = {}
    for study in studies:
        if SOURCE in arms:
            key = json.dumps([study[name][SOURCE]["scores"] for name in sources], sort_keys=True)
        else:
            key = str(len(groups))  # nothing says which source model it is: its own run
        groups.setdefault(key, []).append(study)
    runs = []
    for group in groups.values():
        run: dict[str, dict[str, dict[str, float]]] = {}
        for name in sources:
            for arm in arms:
                scores = [study[name][arm]["scores"] for study in group]
                common = set(scores[0]).intersection(*scores[1:])
                averaged = {i: float(np.mean([s[i] for s in scores])) for i in sorted(common)}
                run.setdefault(name, {})[arm] = averaged
        runs.append(run)
    return runs


def _shown(records: list[dict[str, Any]]) -> str:
    """``threshold | epochs (best) | check Jaccard`` of an arm, one value per study."""

    def join(values: list[str]) -> str:
        return " / ".join(values) if any(values) else ""

    thresholds, epochs, means = [], [], []
    for record in records:
        threshold, ran, best = (record.get(k) for k in ("threshold", "epochs", "best_epoch"))
        thresholds.append("" if threshold is None else f"{threshold:.2f}")
        epochs.append("" if ran is None else f"{ran}" + ("" if best is None else f" ({int(best)})"))
        means.append(f"{float(np.mean(list(record['scores'].values()))):.4f}")
    return f"{join(thresholds)} | {join(epochs)} | {join(means)}"
