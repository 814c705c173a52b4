"""``benchmarks/study_recipe.py`` on the tiny synthetic set: runs, tabulates, resumes."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml
from tests.helpers.config import tiny_raw_config
from tests.helpers.scripts import load_benchmark

from skinet.config.train import TrainConfig


@pytest.mark.heavy
def test_study_runs_cells_and_a_restart_skips_finished_ones(
    tmp_path: Path, synthetic_root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    study = load_benchmark("study_recipe")
    raw = tiny_raw_config(tmp_path, synthetic_root)
    raw["TRAIN_CONFIG"].update(max_epochs=1, use_mlflow_logger=False)
    base = tmp_path / "base.yaml"
    base.write_text(yaml.safe_dump(raw))
    # A wall-clock budget where the schema has TRAIN_CONFIG.max_time, else max_epochs alone.
    budget = "00:00:02:00" if "max_time" in TrainConfig.model_fields else "none"
    out = tmp_path / "study"
    common = ["--output", str(out), "--data-dir", str(synthetic_root), "--base-config", str(base)]
    common += ["--budget", budget, "--seeds", "3", "--image-size", "32", "--device", "cpu"]
    common += ["--define", "lr_high=TRAIN_CONFIG.lr=0.01"]
    # An external labelled folder: the synthetic test split, which no cell trains on.
    clinic = tmp_path / "clinic"
    shutil.copytree(synthetic_root / "ISIC-2017_Test_v2_Data", clinic / "images")
    shutil.copytree(synthetic_root / "ISIC-2017_Test_v2_Part1_GroundTruth", clinic / "masks")
    common += ["--external", f"clinic={clinic / 'images'}:{clinic / 'masks'}"]

    assert study.main([*common, "--candidates", "baseline"]) == 0
    tag = study.budget_tag(None if budget == "none" else budget)
    first = json.loads((out / "results.json").read_text())["cells"]
    row = first[f"{tag}/baseline/seed3"]
    assert row["status"] == "done" and row["num_images"] == 4 and row["epochs"] == 1
    report = json.loads(
        (Path(row["checkpoint"]).parents[2] / "robustness" / "robustness.json").read_text()
    )
    assert row["clean_val_jaccard"] == pytest.approx(report["clean_mean_jaccard"])
    assert row["shifted_mean_jaccard"] == report["mean_shifted_jaccard"]
    # The external score is what `skinet evaluate` gives on that folder.
    from skinet.cli.main import main as skinet_main

    alone = tmp_path / "alone"
    argv = ["evaluate", "--checkpoint", row["checkpoint"], "--images", str(clinic / "images")]
    assert skinet_main([*argv, "--masks", str(clinic / "masks"), "--output", str(alone)]) == 0
    reference = json.loads((alone / "summary.json").read_text())["mean_jaccard"]
    assert row["external_jaccard"] == {"clinic": reference}
    assert row["real_mean_jaccard"] == pytest.approx((row["clean_val_jaccard"] + reference) / 2)
    assert ("TRAIN_CONFIG.max_time" in row["command"]) == (budget != "none")
    if Path("/proc/stat").is_file():  # Linux: the host's share of the CPU while it trained
        assert row["cpu_steal"] is not None and 0.0 <= row["cpu_steal"] <= 1.0
    checkpoint_mtime = Path(row["checkpoint"]).stat().st_mtime_ns

    capsys.readouterr()
    assert study.main([*common, "--candidates", "baseline,lr_high"]) == 0
    printed = capsys.readouterr().out
    assert f"[skip] {tag}/baseline/seed3" in printed and f"[done] {tag}/lr_high/seed3" in printed
    second = json.loads((out / "results.json").read_text())["cells"]
    assert second[f"{tag}/baseline/seed3"] == row  # not rerun
    assert Path(row["checkpoint"]).stat().st_mtime_ns == checkpoint_mtime
    high = second[f"{tag}/lr_high/seed3"]
    assert high["status"] == "done" and "TRAIN_CONFIG.lr=0.01" in high["command"]

    table = (out / "results.md").read_text()
    real, clean = row["real_mean_jaccard"], row["clean_val_jaccard"]
    assert f"| {tag} | baseline | 3 | {real:.4f} | {clean:.4f} | {reference:.4f} |" in table
    assert "| clinic |" in table.splitlines()[0] and "| CPU stolen |" in table.splitlines()[0]
    delta = high["real_mean_jaccard"] - row["real_mean_jaccard"]
    assert f"| {tag} | lr_high |" in table and f"{delta:+.4f}" in table
    # Ranked by the real-image mean, best first.
    order = [line.split(" | ")[1] for line in table.splitlines()[2:4]]
    best_first = sorted(
        ("baseline", "lr_high"), key=lambda c: -second[f"{tag}/{c}/seed3"]["real_mean_jaccard"]
    )
    assert order == best_first
    assert (out / "results.csv").read_text().count("\n") == 3  # header + two cells
    assert study.main(["--output", str(out), "--table"]) == 0
    assert "lr_high" in capsys.readouterr().out
    # --rescore scores a finished cell again without training it.
    assert study.main([*common, "--candidates", "baseline", "--rescore"]) == 0
    assert f"[score] {tag}/baseline/seed3" in capsys.readouterr().out
    assert Path(row["checkpoint"]).stat().st_mtime_ns == checkpoint_mtime
    rescored = json.loads((out / "results.json").read_text())["cells"][f"{tag}/baseline/seed3"]
    assert rescored["external_jaccard"] == row["external_jaccard"]


def test_the_steal_share_is_the_hosts_part_of_the_cpu_time_between_two_readings() -> None:
    cells = load_benchmark("study_cells")
    # user, nice, system, idle, iowait, irq, softirq, steal, guest, guest_nice
    before = [100, 0, 20, 500, 5, 0, 1, 30, 7, 0]
    after = [120, 0, 30, 530, 5, 0, 1, 50, 9, 0]  # 80 ticks passed, 20 of them stolen
    assert cells.steal_share(before, after) == 0.25
    assert cells.steal_share(before, before) is None  # no time passed
    assert cells.steal_share(None, after) is None  # no /proc/stat
    now = cells.cpu_times()
    assert now is None or (len(now) >= 8 and all(value >= 0 for value in now))


def test_candidates_combine_options_and_reject_unknown_ones(tmp_path: Path) -> None:
    study = load_benchmark("study_recipe")
    transforms = tmp_path / "robust.yaml"
    transforms.write_text("TRANSFORM_CONFIG:\n  train_transforms: []\n  seed_value: 7\n")
    overrides = study.candidate_overrides("instance+robust_aug", study.OPTIONS, transforms)
    assert overrides == {
        "MODEL_CONFIG.norm": "instance",
        "TRANSFORM_CONFIG.train_transforms": [],
        "TRANSFORM_CONFIG.seed_value": 7,
    }
    with pytest.raises(SystemExit, match="unknown option 'nope'"):
        study.candidate_overrides("baseline+nope", study.OPTIONS, transforms)
    with pytest.raises(SystemExit, match="transforms file not found"):
        study.candidate_overrides("robust_aug", study.OPTIONS, tmp_path / "missing.yaml")
    assert study.budget_tag("00:00:15:00") == "15min" and study.budget_tag("00:00:00:30") == "30s"


def test_cells_scored_on_fewer_sets_are_marked_and_not_ranked_above_the_others() -> None:
    study = load_benchmark("study_tables")

    def cell(candidate: str, val: float, externals: dict[str, float]) -> dict[str, Any]:
        real = (val + sum(externals.values())) / (1 + len(externals))
        return {
            "status": "done",
            "budget": "b5m",
            "candidate": candidate,
            "seed": 1,
            "clean_val_jaccard": val,
            "external_jaccard": externals,
            "real_mean_jaccard": real,
            "shifted_mean_jaccard": None,
            "epochs": 1,
        }

    cells = {
        "baseline": cell("baseline", 0.8, {"clinic": 0.5}),  # mean of set means 0.65
        "instance": cell("instance", 0.7, {"clinic": 0.7}),  # 0.7: the best ranked
        "early": cell("early", 0.9, {}),  # scored before --external clinic: val alone, 0.9
    }
    rows = study.summarise(cells)
    assert [r["candidate"] for r in rows] == ["instance", "baseline", "early"]
    assert rows[2]["missing_sets"] == ["clinic"] and rows[2]["d_real"] is None
    assert rows[0]["d_real"] == pytest.approx(0.05)
    table = study.markdown_table(cells)
    assert "| early (not ranked: not scored on clinic) |" in table
    assert "mean of set means" in table.splitlines()[0]
    assert "not a pooled per-image mean" in table
