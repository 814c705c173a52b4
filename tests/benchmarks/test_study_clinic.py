"""``benchmarks/study_clinic.py`` on tiny real files: the arms run, k-fold scores its ensemble."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
import yaml
from tests.helpers.scripts import load_benchmark

CLINIC = Path(__file__).resolve().parents[2] / "configs" / "clinic.yaml"


@pytest.mark.heavy
def test_the_kfold_arm_scores_the_ensemble_of_its_folds(
    tmp_path: Path, trained_checkpoint: Path, folder_tree: Path
) -> None:
    study = load_benchmark("study_clinic")
    raw = yaml.safe_load(CLINIC.read_text())
    raw["TRAIN_CONFIG"].update(max_epochs=2, batch_size=2, accelerator="cpu")
    config = tmp_path / "clinic.yaml"
    config.write_text(yaml.safe_dump(raw))
    out = tmp_path / "study"
    argv = ["--checkpoint", str(trained_checkpoint), "--output", str(out), "--config", str(config)]
    argv += ["--source", f"tiny={folder_tree / 'images'}:{folder_tree / 'masks'}"]
    argv += ["--adapt", "6", "--folds", "2", "--variants", "finetune,flips,kfold,kfold_guarded"]
    assert study.main(argv) == 0

    records = json.loads((out / "results.json").read_text())["tiny"]
    assert list(records) == ["source", "calibrated", "finetune", "flips", "kfold", "kfold_guarded"]
    assert all(len(record["scores"]) == 4 for record in records.values())  # the check images
    kfold = records["kfold"]
    [cv_dir] = (out / "tiny" / "kfold" / "runs").glob("cv_*")
    folds = sorted(cv_dir.glob("results/fold_*.json"))
    assert len(folds) == 2
    thresholds = [
        json.loads((Path(json.loads(p.read_text())["run_dir"]) / "metrics.json").read_text())[
            "metrics"
        ]["val_optimal_threshold"]
        for p in folds
    ]
    assert kfold["fold_thresholds"] == pytest.approx(thresholds)
    chosen = json.loads((cv_dir / "cv_results.json").read_text())["ensemble_threshold"]
    assert kfold["threshold"] == chosen["value"] and chosen["selection"] == "pooled_dice"
    [guarded_cv] = (out / "tiny" / "kfold_guarded" / "runs").glob("cv_*")
    guarded = json.loads((guarded_cv / "cv_results.json").read_text())["ensemble_threshold"]
    assert guarded["selection"] == "guarded"
    # The arm's scores are those `skinet evaluate` gives the cv folder (the fold ensemble).
    from skinet.cli.main import main as skinet_main

    check = out / "tiny" / "check"
    alone = tmp_path / "alone"
    evaluate = ["evaluate", "--checkpoint", str(cv_dir), "--split", "none", "--output", str(alone)]
    evaluate += ["--external", f"check={check / 'images'}:{check / 'masks'}"]
    assert skinet_main(evaluate) == 0
    with (alone / "check" / "per_image.csv").open() as rows:
        expected = {row["id"]: float(row["jaccard"]) for row in csv.DictReader(rows)}
    assert kfold["scores"] == pytest.approx(expected)
    assert "| tiny | kfold |" in (out / "results.md").read_text()
