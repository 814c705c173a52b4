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
    # pooled_dice here, so that the kfold_guarded arm shows its variant's overrides reach cv.
    raw["TRAIN_CONFIG"].update(
        max_epochs=2, batch_size=2, accelerator="cpu", threshold_selection="pooled_dice"
    )
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


def _study(folder: Path, source_level: float, gain: float = 0.02) -> Path:
    """A finished study on one source: fine-tuning adds ``gain`` to every check image."""
    images = [f"img{k}" for k in range(30)]
    source = {image: source_level + 0.005 * (k % 7) for k, image in enumerate(images)}
    arms = {
        "source": {"threshold": 0.5, "scores": source},
        "calibrated": {"threshold": 0.4, "scores": {i: v - 0.01 for i, v in source.items()}},
        "finetune": {
            "threshold": 0.6,
            "epochs": 12,
            "best_epoch": 3,
            "scores": {i: v + gain for i, v in source.items()},
        },  # fmt: skip
    }
    folder.mkdir()
    (folder / "results.json").write_text(json.dumps({"clinic": arms}))
    return folder


def _pooled(study, first: Path, *others: Path) -> int:
    return study.main(["--output", str(first), "--table", *(f"--pool={o}" for o in others)])


def test_pooled_tables_pair_the_arms_of_each_source_model(tmp_path: Path, capsys) -> None:
    study = load_benchmark("study_clinic")
    studies = [_study(tmp_path / f"model{k}", level) for k, level in enumerate((0.7, 0.8, 0.9))]
    assert _pooled(study, *studies) == 0
    text = capsys.readouterr().out
    assert "| clinic | finetune | 0.60 / 0.60 / 0.60 | 12 (3) / 12 (3) / 12 (3) |" in text
    # The source models lie 0.1 apart; paired, the gain of fine-tuning is 0.02 in every draw.
    assert "| clinic | finetune | 3 | 30 |" in text
    assert "+0.0200 [+0.0200, +0.0200] | 100% | better |" in text
    assert "run i of every model together" in text


def test_a_second_seed_of_a_source_model_is_averaged_into_its_run(tmp_path: Path, capsys) -> None:
    # Two fine-tuning seeds of the first source model (gains 0.01 and 0.03): one run of 0.02.
    study = load_benchmark("study_clinic")
    first = _study(tmp_path / "a_seed42", 0.7, gain=0.01)
    again = _study(tmp_path / "a_seed43", 0.7, gain=0.03)
    other = _study(tmp_path / "b_seed42", 0.8, gain=0.02)
    assert _pooled(study, first, other, again) == 0
    text = capsys.readouterr().out
    assert "3 studies of 2 source model(s)" in text
    assert "| clinic | finetune | 2 | 30 |" in text
    assert "+0.0200 [+0.0200, +0.0200] | 100% | better |" in text


def test_pool_needs_table_and_finished_studies(tmp_path: Path, capsys) -> None:
    study = load_benchmark("study_clinic")
    done = _study(tmp_path / "done", 0.8)
    cases = [
        (["--output", str(done), "--pool", str(done)], "give it with --table"),
        (["--output", str(done), "--table", "--pool", str(tmp_path / "missing")], "no results"),
        (["--output", str(tmp_path / "missing"), "--table"], "--output"),
    ]
    for argv, message in cases:
        with pytest.raises(SystemExit) as exited:
            study.main(argv)
        assert exited.value.code == 2
        assert message in capsys.readouterr().err
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "results.json").write_text(json.dumps({"other": {}}))
    with pytest.raises(SystemExit):
        _pooled(study, done, elsewhere)
    assert "the studies share no source" in capsys.readouterr().err
    (elsewhere / "results.json").write_text(json.dumps({"clinic": {"other_arm": {"scores": {}}}}))
    with pytest.raises(SystemExit):
        _pooled(study, done, elsewhere)
    assert "the studies share no arm" in capsys.readouterr().err
