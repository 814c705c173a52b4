"""Is model B better than model A? Paired bootstrap intervals of per-image Jaccard differences.

Every model is scored on the same labelled images; the difference of two models is the mean of
their per-image differences, and its 95% interval comes from a bootstrap that resamples images
(the same draw for both models: the comparison is paired). A model trained several times (seeds)
is the mean of its runs per image, and the bootstrap resamples its runs as well, so the interval
holds the spread between seeds too. Runs that belong together across models (run i of every
model fine-tuned from the same source model, or trained on the same fold) can be resampled
together (``paired_runs``): the interval then holds how the difference varies from pair to pair,
not how far apart the pairs are. A difference whose interval holds 0 is no difference.

:func:`compare_scores` does the statistics on per-image scores from anywhere;
:func:`score_checkpoint` and :func:`score_predictions` make those scores from a checkpoint or
a folder of predicted masks; :func:`comparison_table` and :func:`write_comparison` report it.
"""

from __future__ import annotations

import csv
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from skinet.datasets.layouts import Sample
from skinet.imaging.errors import DatasetError
from skinet.metrics.figures import signed

Scores = dict[str, float]
"""Per-image Jaccard of one run on one set, by image ID."""
SetScores = dict[str, list[Scores]]
"""The runs of each model on one set, by model name (the first model is the reference)."""

DEFAULT_DRAWS = 10_000
TABLE_FILE, JSON_FILE, PER_IMAGE_FILE = "comparison.md", "comparison.json", "per_image.csv"
ALL_SETS = "mean of the sets"
"""The row of the mean over the sets (each set weighs the same, whatever its size)."""


@dataclass(frozen=True)
class Row:
    """One model on one set, against the reference model."""

    set: str
    model: str
    runs: int
    images: int
    mean: float
    """Mean per-image Jaccard (the mean of the runs per image, then over images)."""
    difference: float | None = None
    """``mean`` minus the reference's; ``None`` for the reference itself."""
    low: float | None = None
    high: float | None = None
    """The bootstrap interval of ``difference``."""
    better_share: float | None = None
    """Share of images where this model's Jaccard is higher than the reference's."""

    @property
    def verdict(self) -> str:
        if self.low is None or self.high is None:
            return "reference"
        if self.low > 0:
            return "better"
        if self.high < 0:
            return "worse"
        return "no difference"


@dataclass(frozen=True)
class Comparison:
    rows: list[Row]
    confidence: float
    draws: int
    seed: int
    dropped: dict[str, int]
    """Images left out of a set because not every run scored them, by set."""
    paired_runs: bool = False
    """Whether run i of every model was resampled together."""

    @property
    def models(self) -> list[str]:
        return list(dict.fromkeys(row.model for row in self.rows))


def compare_scores(
    scores: Mapping[str, SetScores],
    draws: int = DEFAULT_DRAWS,
    confidence: float = 0.95,
    seed: int = 0,
    paired_runs: bool = False,
) -> Comparison:
    """Compare every model with the first, set by set and over the mean of the sets.

    Args:
        scores: ``{set: {model: [run scores, ...]}}``; every set holds the same models with the
            same number of runs. Only images every run scored are compared.
        draws: Bootstrap resamples.
        confidence: Coverage of the interval (percentile bootstrap).
        seed: Seed of the resampling: the same inputs give the same table.
        paired_runs: Resample run i of every model together (one draw of runs for all
            models), for runs that belong together, such as fine-tuning runs from the same
            source models in the same order. Every model needs the same number of runs.

    Raises:
        ValueError: No set, fewer than two models, sets that hold other models or run counts,
            paired runs of unequal counts, or a set where no image was scored by every run.
    """
    if not scores:
        raise ValueError("nothing to compare: give at least one labelled set")
    first = next(iter(scores.values()))
    models, runs = list(first), {name: len(first[name]) for name in first}
    if len(models) < 2:
        raise ValueError(f"compare needs two models or more, got {models}")
    for set_name, by_model in scores.items():
        shape = {name: len(model_runs) for name, model_runs in by_model.items()}
        if shape != runs or list(by_model) != models:
            raise ValueError(f"set {set_name!r} has runs {shape}, the first set {runs}")
    if paired_runs and len(set(runs.values())) > 1:
        raise ValueError(f"paired runs need as many runs of every model, got {runs}")
    rng = np.random.default_rng(seed)
    if paired_runs:
        weights = [_run_weights(rng, runs[models[0]], draws)] * len(models)
    else:
        weights = [_run_weights(rng, runs[name], draws) for name in models]
    # One draw of runs serves every set: the sets' mean resamples the same runs.
    rows: list[Row] = []
    dropped: dict[str, int] = {}
    boots, observed_means = [], []
    for set_name, by_model in scores.items():
        matrices, dropped[set_name] = _aligned(set_name, [by_model[name] for name in models])
        per_image = [matrix.mean(axis=0) for matrix in matrices]
        boot = _bootstrap(rng, weights, matrices, draws)
        observed = np.array([values.mean() for values in per_image])
        shares = [float(np.mean(values > per_image[0])) for values in per_image]
        rows += _rows(set_name, models, runs, len(per_image[0]), observed, boot, shares, confidence)
        boots.append(boot)
        observed_means.append(observed)
    if len(scores) > 1:
        images = sum(row.images for row in rows if row.model == models[0])
        observed, boot = np.mean(observed_means, axis=0), np.mean(boots, axis=0)
        rows += _rows(ALL_SETS, models, runs, images, observed, boot, None, confidence)
    return Comparison(rows, confidence, draws, seed, dropped, paired_runs)


def _run_weights(rng: np.random.Generator, runs: int, draws: int) -> np.ndarray:
    """``(draws, runs)``: each draw's share of every run (runs resampled with replacement)."""
    if runs == 1:
        return np.ones((draws, 1))
    return rng.multinomial(runs, np.full(runs, 1.0 / runs), size=draws) / runs


def _bootstrap(
    rng: np.random.Generator, weights: list[np.ndarray], matrices: list[np.ndarray], draws: int
) -> np.ndarray:
    """``(models, draws)``: each model's mean Jaccard per resample of images and runs.

    One image draw serves every model (paired); each model's runs are resampled with its own
    ``weights``. Computed in chunks of draws to bound the memory.
    """
    images = matrices[0].shape[1]
    out = np.empty((len(matrices), draws))
    chunk = max(1, 2_000_000 // images)
    for start in range(0, draws, chunk):
        stop = min(draws, start + chunk)
        counts = rng.multinomial(images, np.full(images, 1.0 / images), size=stop - start)
        for index, (weight, matrix) in enumerate(zip(weights, matrices, strict=True)):
            per_image = weight[start:stop] @ matrix  # (draws, images): resampled runs
            out[index, start:stop] = np.einsum("di,di->d", counts, per_image) / images
    return out


def _aligned(set_name: str, by_model: Sequence[list[Scores]]) -> tuple[list[np.ndarray], int]:
    """Per model a ``(runs, images)`` matrix over the images every run scored; how many were
    scored by some runs only."""
    runs = [run for model_runs in by_model for run in model_runs]
    every = set().union(*runs)
    common = sorted(set(runs[0]).intersection(*runs[1:]))
    if not common:
        raise ValueError(f"set {set_name!r}: no image was scored by every model")
    matrices = [
        np.array([[run[image] for image in common] for run in model_runs], dtype=np.float64)
        for model_runs in by_model
    ]
    return matrices, len(every) - len(common)


def _rows(
    set_name: str,
    models: list[str],
    runs: dict[str, int],
    images: int,
    observed: np.ndarray,
    boot: np.ndarray,
    shares: list[float] | None,
    confidence: float,
) -> list[Row]:
    rows = [Row(set_name, models[0], runs[models[0]], images, float(observed[0]))]
    tail = (1.0 - confidence) / 2.0 * 100.0
    for index, model in enumerate(models[1:], start=1):
        low, high = np.percentile(boot[index] - boot[0], [tail, 100.0 - tail])
        rows.append(
            Row(
                set_name,
                model,
                runs[model],
                images,
                float(observed[index]),
                difference=float(observed[index] - observed[0]),
                low=float(low),
                high=float(high),
                better_share=None if shares is None else shares[index],
            )
        )
    return rows


def score_samples(predictor: Any, samples: Sequence[Sample], progress: bool = True) -> Scores:
    """Per-image Jaccard of a predictor (:class:`~skinet.inference.predictor.Predictor`) at
    each image's own resolution, as ``skinet evaluate`` scores it; failed images are absent."""
    from skinet.evaluation.evaluate import evaluate_predictor

    result = evaluate_predictor(predictor, samples, progress=progress)
    return {image_id: metrics.jaccard for image_id, metrics in result.metrics.items()}


def score_predictions(folder: Path, samples: Sequence[Sample]) -> Scores:
    """Per-image Jaccard of the predicted masks in ``folder`` (paired by image ID, as
    ``skinet evaluate --predictions`` pairs them); images without a prediction are absent.

    Raises:
        DatasetError: No mask in ``folder`` has the ID of one of ``samples``.
    """
    from skinet.evaluation.mask_folders import index_masks
    from skinet.imaging.decode import read_mask
    from skinet.metrics.masks import compute_mask_metrics

    predictions = index_masks(folder)
    wanted = [sample for sample in samples if sample.id in predictions]
    if not wanted:
        raise DatasetError(
            f"no predicted mask in {folder} has the ID of one of the {len(samples)} labelled "
            f"image(s) (e.g. {[s.id for s in samples[:3]]}; predictions e.g. "
            f"{sorted(predictions)[:3]})"
        )
    scores = {}
    for sample in wanted:
        target = read_mask(sample.mask_path)
        pred = read_mask(predictions[sample.id])
        if pred.shape != target.shape:
            raise DatasetError(
                f"{predictions[sample.id]}: predicted mask {pred.shape} and ground truth "
                f"{sample.mask_path} {target.shape} differ in size"
            )
        scores[sample.id] = compute_mask_metrics(pred, target).jaccard
    return scores


def comparison_table(comparison: Comparison) -> str:
    """The comparison as a Markdown table, with a line on how to read it."""
    reference = comparison.models[0]
    percent = f"{comparison.confidence:.0%}"
    runs = "the runs, run i of every model together" if comparison.paired_runs else "the runs"
    lines = [
        f"| set | model | runs | images | mean Jaccard | Δ vs {reference} [{percent} interval] "
        "| better on | verdict |",
        "|---|---|---:|---:|---:|---|---:|---|",
    ]
    for row in comparison.rows:
        if row.difference is None or row.low is None or row.high is None:
            delta, share = "", ""
        else:
            delta = f"{signed(row.difference)} [{signed(row.low)}, {signed(row.high)}]"
            share = "" if row.better_share is None else f"{row.better_share:.0%}"
        lines.append(
            f"| {row.set} | {row.model} | {row.runs} | {row.images} | {row.mean:.4f} | {delta} "
            f"| {share} | {row.verdict} |"
        )
    dropped = {name: count for name, count in comparison.dropped.items() if count}
    pooled = any(row.set == ALL_SETS for row in comparison.rows)
    notes = [
        "",
        f"Mean per-image Jaccard. Δ: the mean of the per-image differences to {reference}, with "
        f"a {percent} paired bootstrap interval ({comparison.draws} draws, seed "
        f"{comparison.seed}) that resamples the images and, for several runs, {runs}; a Δ "
        "whose interval holds 0 is no difference. Better on: share of images with a higher "
        f"Jaccard than {reference}."
        + (f" '{ALL_SETS}': every set weighs the same." if pooled else ""),
    ]
    if dropped:
        notes.append(f"Left out, not scored by every run: {dropped}.")
    return "\n".join(lines + notes) + "\n"


def write_comparison(
    comparison: Comparison,
    scores: Mapping[str, SetScores],
    output: Path,
    models: Mapping[str, Mapping[str, Any]] | None = None,
) -> dict[str, Path]:
    """``comparison.md``, ``comparison.json`` and ``per_image.csv`` (set, image, model, run,
    jaccard) in ``output``; each written whole or not at all. ``models``: what each model is
    (its ``paths``, and the ``options`` it was predicted with), kept in ``comparison.json`` and
    the options under the table."""
    output.mkdir(parents=True, exist_ok=True)
    paths = {"table": output / TABLE_FILE, "json": output / JSON_FILE}
    paths["per_image"] = output / PER_IMAGE_FILE
    summary = {
        "reference": comparison.models[0],
        "confidence": comparison.confidence,
        "draws": comparison.draws,
        "seed": comparison.seed,
        "dropped": comparison.dropped,
        "paired_runs": comparison.paired_runs,
        "rows": [{**asdict(row), "verdict": row.verdict} for row in comparison.rows],
    }
    if models is not None:
        summary["models"] = {name: dict(model) for name, model in models.items()}
    _write_atomic(paths["table"], comparison_table(comparison) + options_note(models or {}))
    _write_atomic(paths["json"], json.dumps(summary, indent=2))
    tmp = paths["per_image"].with_name(f".{PER_IMAGE_FILE}.partial")
    with tmp.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["set", "image", "model", "run", "jaccard"])
        for set_name, by_model in scores.items():
            for model, model_runs in by_model.items():
                for run, run_scores in enumerate(model_runs):
                    for image_id, value in sorted(run_scores.items()):
                        writer.writerow([set_name, image_id, model, run, f"{value:.6f}"])
    os.replace(tmp, paths["per_image"])
    return paths


def options_note(models: Mapping[str, Mapping[str, Any]]) -> str:
    """The lines under the table that say which models were predicted with which flags."""
    given = [f"{name}: `{m['options']}`" for name, m in models.items() if "options" in m]
    return f"\nPredicted with: {'; '.join(given)} (`--options`).\n" if given else ""


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.partial")
    tmp.write_text(text)
    os.replace(tmp, path)
