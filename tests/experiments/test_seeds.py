"""Multi-seed runs and the block ablation on the synthetic data with a real MLflow store."""

from __future__ import annotations

import csv
import json
import statistics
from pathlib import Path
from typing import Any

import pytest
from mlflow.tracking import MlflowClient
from tests.helpers.sweep_fakes import FakeTrainer, one_epoch

from skinet.config.experiment import parse_config
from skinet.experiments.ablation import check_modes, run_ablation
from skinet.experiments.seeds import run_seeds
from skinet.experiments.summary import summarize_runs


def _client(raw: dict[str, Any]) -> tuple[MlflowClient, str]:
    db = Path(raw["TRAIN_CONFIG"]["output_dir"]).resolve() / "mlflow.db"
    client = MlflowClient(f"sqlite:///{db}")
    return client, client.get_experiment_by_name("tiny").experiment_id


@pytest.mark.heavy
def test_three_seeds_give_three_runs_and_a_matching_summary(tiny_raw: dict[str, Any]) -> None:
    raw = one_epoch(tiny_raw)
    summary = run_seeds(parse_config(raw), [42, 200, 300])

    client, experiment_id = _client(raw)
    runs = client.search_runs([experiment_id])
    seed_runs = {r.data.tags["skinet.seed"]: r for r in runs if "skinet.seed" in r.data.tags}
    assert sorted(seed_runs) == ["200", "300", "42"]
    assert all(r.info.run_name.startswith(f"tiny_seed{s}_") for s, r in seed_runs.items())
    monitor = "val_best_dice_at_threshold"
    for metric in (monitor, "test_dice", "test_iou"):
        values = [summary.per_seed[s][metric] for s in (42, 200, 300)]
        assert summary.mean[metric] == pytest.approx(statistics.fmean(values))
        assert summary.std[metric] == pytest.approx(statistics.stdev(values))
    logged = [seed_runs[str(s)].data.metrics["test_dice"] for s in (42, 200, 300)]
    assert summary.mean["test_dice"] == pytest.approx(statistics.fmean(logged), rel=1e-5)

    [summary_run] = [r for r in runs if r.info.run_name == "seeds_summary_tiny"]
    assert summary_run.data.metrics["test_dice_mean"] == pytest.approx(summary.mean["test_dice"])
    assert summary_run.data.metrics[f"{monitor}_std"] == pytest.approx(summary.std[monitor])
    on_disk = json.loads(summary.json_path.read_text())  # type: ignore[union-attr]
    assert on_disk["seeds"] == [42, 200, 300] and on_disk["mean"] == summary.mean
    assert "| test_dice |" in summary.markdown_path.read_text()  # type: ignore[union-attr]


def test_seed_summary_of_one_seed_has_zero_std() -> None:
    mean, std = summarize_runs("val_loss", {1: {"val_loss": 0.5, "test_dice": 0.7}})
    assert mean == {"val_loss": 0.5, "test_dice": 0.7} and std == {
        "val_loss": 0.0,
        "test_dice": 0.0,
    }


def test_duplicate_seeds_are_refused(tiny_raw: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="duplicates"):
        run_seeds(parse_config(tiny_raw), [1, 1], run_training_fn=FakeTrainer())


@pytest.mark.heavy
def test_ablation_2x1_writes_the_table(tiny_raw: dict[str, Any]) -> None:
    raw = one_epoch(tiny_raw)
    result = run_ablation(parse_config(raw), ["classical", "he2"], ["attention_gate"])

    with result.csv_path.open() as handle:
        rows = list(csv.DictReader(handle))
    assert [(r["encoder"], r["merge"]) for r in rows] == [
        ("classical", "attention_gate"),
        ("he2", "attention_gate"),
    ]
    assert list(rows[0]) == [
        "encoder",
        "merge",
        "params",
        "val_best_dice_at_threshold",
        "test_dice",
        "test_iou",
        "sec_per_epoch",
    ]
    assert int(rows[0]["params"]) != int(rows[1]["params"])
    assert all(0.0 <= float(r["test_dice"]) <= 1.0 for r in rows)
    markdown = result.markdown_path.read_text()
    assert "| classical | attention_gate |" in markdown and "| he2 | attention_gate |" in markdown
    assert result.folder.name.startswith("ablation_") and result.csv_path.parent == result.folder

    client, experiment_id = _client(raw)
    children = client.search_runs(
        [experiment_id], f"tags.`mlflow.parentRunId` = '{result.parent_run_id}'"
    )
    assert sorted(r.info.run_name for r in children) == [
        "ablation_encclassical_mergeattention_gate",
        "ablation_enche2_mergeattention_gate",
    ]
    artifacts = {a.path for a in client.list_artifacts(result.parent_run_id)}
    assert {"ablation_results.csv", "ablation_results.md"} <= artifacts


def test_unknown_ablation_mode_lists_the_allowed_ones() -> None:
    with pytest.raises(ValueError, match="--merge-modes: unknown mode"):
        check_modes(["he2"], ["bogus"])
