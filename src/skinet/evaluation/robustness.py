"""The shift report: a checkpoint scored on a split under fixed, seeded device-like shifts.

Every image is read once at its original resolution, shifted by each condition of
:data:`skinet.evaluation.shifts.SHIFTS` (and left as it is for ``clean``), predicted with the
checkpoint's own preprocessing and scored against its (shifted) mask. Outputs of
:func:`write_robustness`: ``robustness.csv`` (one row per condition: mean per-image Jaccard and
its drop from clean), ``robustness_per_image.csv``, ``robustness.json`` (the summary; its
``mean_shifted_jaccard`` is the number recipes are ranked by) and ``robustness.png``.
"""

from __future__ import annotations

import csv
import io
import json
import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from skinet.datasets.layouts import Sample
from skinet.evaluation.evaluate import read_labelled
from skinet.evaluation.shifts import SHIFTS, Shift, apply_shift, shift_rng
from skinet.imaging.decode import DecodeError
from skinet.inference.predictor import Predictor
from skinet.metrics.masks import MaskMetrics, compute_mask_metrics, summarize_metrics

log = logging.getLogger(__name__)

CLEAN = "clean"
TABLE_FILE = "robustness.csv"
PER_IMAGE_FILE = "robustness_per_image.csv"
SUMMARY_FILE = "robustness.json"
CHART_FILE = "robustness.png"


@dataclass
class RobustnessResult:
    """Per-image metrics of every condition (``clean`` first), by image ID."""

    shifts: tuple[Shift, ...]
    seed: int
    metrics: dict[str, dict[str, MaskMetrics]] = field(default_factory=dict)
    failures: dict[str, str] = field(default_factory=dict)
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def conditions(self) -> list[str]:
        """``clean``, then every shift's key."""
        return [CLEAN, *(shift.key for shift in self.shifts)]

    def rows(self) -> list[dict[str, Any]]:
        """One row per condition: what it is, its mean metrics and the Jaccard drop from clean."""
        clean = self._mean_jaccard(CLEAN)
        described = {shift.key: shift for shift in self.shifts}
        rows = []
        for condition in self.conditions:
            summary = summarize_metrics(list(self.metrics.get(condition, {}).values()))
            shift = described.get(condition)
            mean = self._mean_jaccard(condition)
            rows.append(
                {
                    "condition": condition,
                    "shift": shift.name if shift else CLEAN,
                    "level": shift.level if shift else "",
                    "value": shift.value if shift else "",
                    "description": shift.description if shift else "no shift",
                    "num_images": summary["num_images"],
                    "mean_jaccard": mean,
                    "drop": clean - mean,
                    **{
                        key: summary.get(key, float("nan"))
                        for key in (
                            "mean_dice",
                            "mean_sensitivity",
                            "mean_specificity",
                            "median_area_ratio",
                        )
                    },
                }
            )
        return rows

    def _mean_jaccard(self, condition: str) -> float:
        values = [m.jaccard for m in self.metrics.get(condition, {}).values()]
        return float(np.mean(values)) if values else float("nan")

    @property
    def summary(self) -> dict[str, Any]:
        """Clean and mean-over-shifts Jaccard, every condition's row, failures and settings."""
        rows = self.rows()
        shifted = [row for row in rows if row["condition"] != CLEAN]
        mean_shifted = float(np.mean([r["mean_jaccard"] for r in shifted])) if shifted else None
        worst = max(shifted, key=lambda r: r["drop"], default=None)
        return {
            "num_images": rows[0]["num_images"],
            "clean_mean_jaccard": rows[0]["mean_jaccard"],
            "mean_shifted_jaccard": mean_shifted,
            "mean_drop": None if mean_shifted is None else rows[0]["mean_jaccard"] - mean_shifted,
            "worst_condition": worst["condition"] if worst else None,
            "seed": self.seed,
            "conditions": {row["condition"]: row for row in rows},
            "num_failed": len(self.failures),
            "failures": dict(self.failures),
            **self.info,
        }

    @property
    def exit_code(self) -> int:
        """0 when every image was scored under every condition, 1 otherwise."""
        return 1 if self.failures else 0


def evaluate_under_shifts(
    predictor: Predictor,
    samples: Sequence[Sample],
    shifts: Sequence[Shift] = SHIFTS,
    seed: int = 0,
    progress: bool = True,
) -> RobustnessResult:
    """Predict every sample clean and under every shift; score each against its mask."""
    from rich.progress import MofNCompleteColumn, Progress

    result = RobustnessResult(tuple(shifts), seed)
    for condition in result.conditions:
        result.metrics[condition] = {}
    columns = (*Progress.get_default_columns()[:3], MofNCompleteColumn())
    with Progress(*columns, disable=not progress) as bar:
        task = bar.add_task(f"{len(result.conditions)} conditions", total=len(samples))
        for sample in samples:
            try:
                _score_sample(predictor, sample, result, input_size=predictor.image_size)
            except (DecodeError, OSError, ValueError) as error:
                result.failures[sample.id] = str(error)
                log.error("%s: %s", sample.id, error)
            bar.advance(task)
    return result


def _score_sample(
    predictor: Predictor, sample: Sample, result: RobustnessResult, input_size: int
) -> None:
    image, mask = read_labelled(sample)
    conditions: list[Shift | None] = [None, *result.shifts]
    scores: dict[str, MaskMetrics] = {}
    # A batch of conditions at a time: the shifted copies of a large image (a frame at 0.5 has
    # 5x its pixels) are not all held at once.
    for start in range(0, len(conditions), predictor.batch_size):
        chunk = conditions[start : start + predictor.batch_size]
        pairs = [
            (image, mask)
            if shift is None
            else apply_shift(
                shift, image, mask, input_size, shift_rng(result.seed, shift, sample.id)
            )
            for shift in chunk
        ]
        preds = predictor.predict_batch([shifted for shifted, _ in pairs])
        for shift, pred, (_, target) in zip(chunk, preds, pairs, strict=True):
            scores[CLEAN if shift is None else shift.key] = compute_mask_metrics(pred, target)
    for condition, metrics in scores.items():
        result.metrics[condition][sample.id] = metrics


def _write_atomic(path: Path, data: str | bytes) -> None:
    """Write to ``path.tmp`` then rename, so a killed run never leaves a half-written file."""
    tmp = path.with_name(f".{path.name}.tmp")
    if isinstance(data, str):
        tmp.write_text(data)
    else:
        tmp.write_bytes(data)
    os.replace(tmp, path)


def _csv_text(rows: list[dict[str, Any]]) -> str:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=list(rows[0]) if rows else ["condition"])
    writer.writeheader()
    writer.writerows(rows)
    return buffer.getvalue()


def write_robustness(result: RobustnessResult, output_dir: Path) -> dict[str, Path]:
    """Write the table, per-image Jaccards, chart and (last) the JSON summary; their paths."""
    output_dir.mkdir(parents=True, exist_ok=True)
    paths = {
        "table": output_dir / TABLE_FILE,
        "per_image": output_dir / PER_IMAGE_FILE,
        "chart": output_dir / CHART_FILE,
        "summary": output_dir / SUMMARY_FILE,
    }
    # The summary is the completion marker: remove a stale one before rewriting the rest.
    paths["summary"].unlink(missing_ok=True)
    rows = result.rows()
    _write_atomic(paths["table"], _csv_text(rows))
    clean_ids = list(result.metrics.get(CLEAN, {}))
    per_image = [
        {"id": image_id, **{c: result.metrics[c][image_id].jaccard for c in result.conditions}}
        for image_id in clean_ids
    ]
    _write_atomic(paths["per_image"], _csv_text(per_image))
    _write_atomic(paths["chart"], render_robustness_chart(rows, result.info.get("title", "")))
    _write_atomic(paths["summary"], json.dumps(result.summary, indent=2))
    return paths


def render_robustness_chart(rows: list[dict[str, Any]], title: str = "") -> bytes:
    """PNG bytes: mean Jaccard per condition as horizontal bars, clean as a reference line."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    clean = rows[0]["mean_jaccard"]
    shifted = rows[1:]
    figure = Figure(figsize=(8.0, 0.38 * len(shifted) + 1.6), dpi=120)
    FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    positions = np.arange(len(shifted))[::-1]
    colors = ["#7570b3" if row["level"] == "mild" else "#d95f02" for row in shifted]
    axes.barh(positions, [row["mean_jaccard"] for row in shifted], color=colors, height=0.7)
    for position, row in zip(positions, shifted, strict=True):
        axes.text(
            min(row["mean_jaccard"], 1.0) + 0.01,
            position,
            f"{row['mean_jaccard']:.3f} ({-row['drop']:+.3f})",
            va="center",
            fontsize=8,
            bbox={"facecolor": "white", "edgecolor": "none", "pad": 0.5},
        )
    axes.axvline(clean, color="black", linewidth=1.2, label=f"clean {clean:.3f}")
    axes.set_yticks(positions, [row["condition"] for row in shifted], fontsize=8)
    axes.set_xlim(0.0, 1.15)
    axes.set_xlabel("mean per-image Jaccard (change from clean)")
    axes.set_title(title or f"Jaccard under device shifts ({rows[0]['num_images']} images)")
    axes.legend(
        handles=[*axes.get_legend_handles_labels()[0], *_level_patches()],
        loc="lower right",
        fontsize=8,
    )
    axes.grid(axis="x", alpha=0.3)
    axes.spines[["top", "right"]].set_visible(False)
    figure.tight_layout()
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png")
    return buffer.getvalue()


def _level_patches() -> list[Any]:
    from matplotlib.patches import Patch

    return [Patch(color="#7570b3", label="mild"), Patch(color="#d95f02", label="strong")]


def print_robustness_table(result: RobustnessResult) -> None:
    """The per-condition table and the mean over shifts, on the console."""
    from rich.table import Table

    from skinet.runtime.console import console

    summary = result.summary
    table = Table(title=f"Jaccard under device shifts ({summary['num_images']} images)")
    columns = ("condition", "strength", "mean Jaccard", "change", "sens.", "spec.", "area ratio")
    for column in columns:
        table.add_column(column, justify="left" if column in ("condition", "strength") else "right")
    for row in result.rows():
        change = "" if row["condition"] == CLEAN else f"{-row['drop']:+.4f}"
        table.add_row(
            row["condition"],
            row["description"],
            f"{row['mean_jaccard']:.4f}",
            change,
            f"{row['mean_sensitivity']:.3f}",
            f"{row['mean_specificity']:.3f}",
            f"{row['median_area_ratio']:.2f}",
        )
    if summary["mean_shifted_jaccard"] is not None:
        table.add_row(
            "mean over shifts",
            "",
            f"{summary['mean_shifted_jaccard']:.4f}",
            f"{-summary['mean_drop']:+.4f}",
            style="bold",
        )
    table.caption = (
        "change: shifted minus clean mean Jaccard (negative: worse; the CSV's drop is its "
        "opposite); area ratio: median predicted / true lesion area (> 1: contour drawn too large)"
    )
    console().print(table)
