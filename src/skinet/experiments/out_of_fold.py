"""The out-of-fold pass of ``skinet cv``: every training image scored by the fold model that
did not train on it (``<cv folder>/out_of_fold/``), and the folds' ensemble's threshold chosen
on those probabilities; with ``skinet cv --tune-tta`` also whether the ensemble predicts with
flips, by the test of ``skinet evaluate --tune-tta``
(:func:`skinet.evaluation.tuning.judge_flips`).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

from skinet.checkpoints.threshold import DEFAULT_THRESHOLD, ENSEMBLE_THRESHOLD, rounded
from skinet.config.experiment import ExperimentConfig
from skinet.datasets.locate import index_dataset

if TYPE_CHECKING:
    from skinet.evaluation.tuning import FlipChoice, MapTuner

log = logging.getLogger(__name__)


OUT_OF_FOLD = "out_of_fold"
"""Folder of the out-of-fold evaluation in a cv folder."""


def oof_selection(cfg: ExperimentConfig) -> str:
    """What the out-of-fold figures are, in their report: what each fold chose on the chunk it
    is scored on (its best epoch, unless ``checkpoint_config.select: last``, and threshold)."""
    chosen = (
        "threshold was"
        if cfg.train.checkpoint_config.select == "last"
        else "best epoch and threshold were"
    )
    return (
        f"optimistic: each fold's {chosen} chosen on the validation chunk it is scored on; "
        "single fold models, not their ensemble (the test split is unbiased)"
    )


def score_out_of_fold(
    cfg: ExperimentConfig,
    cv_dir: Path,
    fold_splits: list[dict[str, list[str]]],
    checkpoints: dict[int, str | None],
    tune_tta: bool = False,
) -> dict[str, Any] | None:
    """Each fold's best model on its own validation chunk, pooled: ``<cv>/out_of_fold/``.

    Every training image is scored once, by the one model that did not train on it (nnU-Net's
    way of validating a cross-validation), at the original resolution with each fold's own
    threshold. Each fold's best epoch and threshold were chosen on that same chunk, so this is
    the pooled validation figure of the single fold models, optimistic as any validation
    figure, and not a score of the folds' ensemble; the report says so (``selection``).

    The same pass chooses the ensemble's threshold on the pooled out-of-fold probabilities
    (:func:`ensemble_tuner`): one choice on every training image instead of the mean
    of the folds' choices, each made on one chunk. With ``tune_tta`` the threshold is tuned
    with flips too (in the same pass: each image is read once) and flips are kept only when
    their gain is clear (:func:`~skinet.evaluation.tuning.judge_flips`). Returns the summary,
    with the choice under ``ensemble_threshold`` (``None`` when a fold has no best checkpoint).
    """
    from skinet.evaluation.evaluate import EvaluationResult, evaluate_predictor, write_evaluation
    from skinet.inference.predictor import Predictor

    if any(checkpoints.get(fold) is None for fold in range(1, len(fold_splits) + 1)):
        log.warning("out-of-fold scores skipped: a fold has no best checkpoint")
        return None
    _, splits = index_dataset(cfg)
    by_id = {s.id: s for name in ("train", "val") for s in splits.get(name, [])}
    pooled = EvaluationResult(
        info={"kind": "out-of-fold", "cv_folder": str(cv_dir), "selection": oof_selection(cfg)}
    )
    thresholds = {}
    tuners: list[MapTuner] = []  # without flips; with them (tune_tta)
    for fold, ids in enumerate(fold_splits, start=1):
        predictor = Predictor.from_checkpoint(str(checkpoints[fold]), device="auto", tta=False)
        thresholds[str(fold)] = predictor.threshold
        if not tuners and cfg.train.optimal_threshold is None:
            tuners = [ensemble_tuner(predictor.config) for _ in range(2 if tune_tta else 1)]
        chunk = [by_id[i] for i in ids["val"]]
        # Without flips, and with them (tune_tta): tuners[tta].
        hooks = {bool(tta): tuner.update for tta, tuner in enumerate(tuners)}
        part = evaluate_predictor(predictor, chunk, progress=False, on_probabilities=hooks)
        for name in ("metrics", "surface", "sizes", "failures"):
            getattr(pooled, name).update(getattr(part, name))
    pooled.info["fold_thresholds"] = thresholds
    if tuners and tuners[0].count > 0:
        pooled.info[ENSEMBLE_THRESHOLD] = ensemble_record(tuners, cv_dir)
    write_evaluation(pooled, cv_dir / OUT_OF_FOLD)
    summary = pooled.summary
    log.info(
        "out-of-fold validation (each fold's model on the chunk that chose its epoch and "
        "threshold: optimistic): mean per-image Jaccard %.4f over %d images (%s)",
        summary["mean_jaccard"],
        summary["num_images"],
        cv_dir / OUT_OF_FOLD,
    )
    if ENSEMBLE_THRESHOLD in summary:
        _log_choice(summary[ENSEMBLE_THRESHOLD], thresholds)
    return summary


def _log_choice(chosen: dict[str, Any], fold_thresholds: dict[str, float]) -> None:
    from skinet.metrics.figures import signed

    log.info(
        "the ensemble's threshold: %.2f, chosen on the %d out-of-fold images (%s; the folds "
        "chose %s)",
        chosen["value"],
        chosen["num_images"],
        chosen["selection"],
        ", ".join(f"{t:.2f}" for t in fold_thresholds.values()),
    )
    if "tta" in chosen:
        low, high = chosen["tta_interval"]
        log.info(
            "flips at prediction time: mean per-image Jaccard %s [%s, %s] on the out-of-fold "
            "images: %s",
            signed(chosen["tta_gain"]),
            signed(low),
            signed(high),
            "the ensemble predicts with flips"
            if chosen["tta"]
            else "without them (no clear gain; --tta still adds them)",
        )


def ensemble_tuner(fold_config: ExperimentConfig) -> MapTuner:
    """The sweep that chooses the folds' ensemble threshold: the folds' own rule
    (``TRAIN_CONFIG.threshold_selection``) and reference (``threshold_reference``, which
    fine-tuning resolves to the source checkpoint's; else 0.5)."""
    from skinet.evaluation.tuning import MapTuner

    train = fold_config.train
    reference = train.threshold_reference
    return MapTuner(
        train.threshold_selection, DEFAULT_THRESHOLD if reference is None else reference
    )


def ensemble_record(tuners: list[MapTuner], cv_dir: Path) -> dict[str, Any]:
    """``cv_results.json``'s :data:`ENSEMBLE_THRESHOLD`: the value and how it was chosen; with
    a second tuner (fed with flips), whether to predict with them (``tta``, ``tta_gain``,
    ``tta_interval``) and the threshold of each way (``threshold_without_tta``,
    ``threshold_with_tta``)."""
    tuned = tuners[0].result()
    flips: FlipChoice | None = None
    if len(tuners) > 1:
        from skinet.evaluation.tuning import judge_flips

        flips = judge_flips(tuned, tuners[1].result())
        tuned = flips.tuned
    record: dict[str, Any] = {
        "value": tuned.threshold,
        "selection": tuned.selection,
        "num_images": tuned.num_images,
        "tuned_on": f"out-of-fold images of {cv_dir.name}",
        "pooled_dice": tuned.dice,
        "mean_jaccard": tuned.mean_jaccard,
    }
    if tuned.reference is not None:
        record["source_threshold"] = tuned.reference
    if flips is not None:
        record.update(flips.record())
    return rounded(record)
