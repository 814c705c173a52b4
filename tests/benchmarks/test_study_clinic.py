"""``benchmarks/study_clinic.py`` on tiny real files: the arms run, k-fold scores its ensemble."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
import torch
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
    argv += ["--adapt", "6", "--folds", "2", "--blend", "0.25"]
    argv += ["--variants", "finetune,flips,kfold,kfold_guarded,wise_finetune,wise_kfold,tta_kfold"]
    assert study.main(argv) == 0

    records = json.loads((out / "results.json").read_text())["tiny"]
    assert list(records) == [
        "source", "calibrated", "finetune", "flips", "kfold", "kfold_guarded",
        "wise_finetune", "wise_kfold", "tta_kfold",
    ]  # fmt: skip
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
    assert chosen["selection"] == "pooled_dice" and isinstance(chosen["tta"], bool)
    assert kfold["threshold"] == chosen["threshold_without_tta"]
    flipped = records["tta_kfold"]
    assert flipped["threshold"] == chosen["value"] and flipped["tta"] is chosen["tta"]
    assert flipped["flips_choice"] == kfold["flips_choice"] == chosen
    [guarded_cv] = (out / "tiny" / "kfold_guarded" / "runs").glob("cv_*")
    guarded = json.loads((guarded_cv / "cv_results.json").read_text())["ensemble_threshold"]
    assert guarded["selection"] == "guarded"
    # The arms' scores are those `skinet evaluate` gives the cv folder (the fold ensemble):
    # tta_kfold as the cv chose, kfold without flips at the threshold chosen without them.
    from skinet.cli.main import main as skinet_main

    check = out / "tiny" / "check"
    for arm, options in (
        ("tta_kfold", []),
        ("kfold", ["--no-tta", "--threshold", str(chosen["threshold_without_tta"])]),
    ):
        alone = tmp_path / arm
        evaluate = ["evaluate", "--checkpoint", str(cv_dir), "--split", "none"]
        evaluate += ["--external", f"check={check / 'images'}:{check / 'masks'}"]
        assert skinet_main([*evaluate, *options, "--output", str(alone)]) == 0
        with (alone / "check" / "per_image.csv").open() as rows:
            expected = {row["id"]: float(row["jaccard"]) for row in csv.DictReader(rows)}
        assert records[arm]["scores"] == pytest.approx(expected)
    assert "| tiny | kfold |" in (out / "results.md").read_text()
    _check_blends(out, trained_checkpoint, cv_dir, tmp_path)
    # Again with the fine-tuned weights whole: the trained arms resume, the blends of another
    # weight are made again, and score what their base arms score (a fold ensemble at the
    # threshold its cv chose, not the mean of its folds').
    assert (
        study.main(
            [*argv[: argv.index("--blend")], "--blend", "1.0", *argv[argv.index("--blend") + 2 :]]
        )
        == 0
    )
    again = json.loads((out / "results.json").read_text())["tiny"]
    assert again["kfold"] == records["kfold"]
    for base in ("finetune", "kfold"):
        assert again[f"wise_{base}"]["blend"] == 1.0
        assert again[f"wise_{base}"]["scores"] == pytest.approx(again[base]["scores"])


def _check_blends(out: Path, source: Path, cv_dir: Path, tmp_path: Path) -> None:
    """Each blend holds 0.75 * source + 0.25 * its fine-tuned model; the CLI scores it as the
    study did; the tables put each blend against the arm it blends."""
    from skinet.checkpoints.state_dict import normalize_state_dict_keys
    from skinet.cli.main import main as skinet_main

    def weights(path: Path) -> dict[str, torch.Tensor]:
        state = torch.load(path, map_location="cpu", weights_only=True)["state_dict"]
        return normalize_state_dict_keys(state)

    [run] = (out / "tiny" / "finetune" / "runs").glob("*/metrics.json")
    tuned = {"wise_finetune": [Path(json.loads(run.read_text())["best_checkpoint"])]}
    tuned["wise_kfold"] = [
        Path(json.loads((Path(json.loads(p.read_text())["run_dir"]) / "metrics.json").read_text())[
            "best_checkpoint"
        ])
        for p in sorted(cv_dir.glob("results/fold_*.json"))
    ]  # fmt: skip
    start = weights(source)
    records = json.loads((out / "results.json").read_text())["tiny"]
    for arm, models in tuned.items():
        blends = [Path(p) for p in records[arm]["blended"]]
        assert len(blends) == len(models) and records[arm]["blend"] == 0.25
        for blend, model in zip(blends, models, strict=True):
            mixed, fine = weights(blend), weights(model)
            key = next(k for k, v in fine.items() if v.is_floating_point() and v.numel() > 1)
            assert not torch.equal(fine[key], start[key])  # fine-tuning moved it
            for name, value in fine.items():
                expected = 0.75 * start[name] + 0.25 * value if value.is_floating_point() else value
                assert torch.allclose(mixed[name], expected, atol=1e-6), name
    check = out / "tiny" / "check"
    alone = tmp_path / "blend_alone"
    evaluate = ["evaluate", "--checkpoint", records["wise_finetune"]["blended"][0]]
    evaluate += ["--split", "none", "--output", str(alone)]
    evaluate += ["--external", f"check={check / 'images'}:{check / 'masks'}"]
    assert skinet_main(evaluate) == 0
    with (alone / "check" / "per_image.csv").open() as rows:
        expected = {row["id"]: float(row["jaccard"]) for row in csv.DictReader(rows)}
    assert records["wise_finetune"]["scores"] == pytest.approx(expected)
    text = (out / "results.md").read_text()
    against_kfold = text.split("### Against kfold\n")[1].split("###")[0]
    assert "| tiny | wise_kfold |" in against_kfold and "wise_finetune" not in against_kfold


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
        (["--output", str(done), "--pool", str(done)], "give them with --table"),
        (["--output", str(done), "--against", "finetune"], "give them with --table"),
        (["--output", str(done), "--table", "--against", "lowg"], "--against ['lowg']"),
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


def test_against_adds_a_table_against_any_arm(tmp_path: Path, capsys) -> None:
    study = load_benchmark("study_clinic")
    studies = [_study(tmp_path / f"model{k}", level) for k, level in enumerate((0.7, 0.8))]
    argv = ["--output", str(studies[0]), "--table", "--pool", str(studies[1])]
    assert study.main([*argv, "--against", "finetune"]) == 0
    assert capsys.readouterr().out.count("### Against finetune") == 1  # tabled once, not twice
    for folder in studies:  # a calibration arm, 0.01 above the fine-tuned one everywhere
        arms = json.loads((folder / "results.json").read_text())
        finetuned = arms["clinic"]["finetune"]["scores"]
        arms["clinic"]["calibrated_flips"] = {
            "threshold": 0.5, "scores": {i: v + 0.01 for i, v in finetuned.items()}
        }  # fmt: skip
        (folder / "results.json").write_text(json.dumps(arms))
    assert study.main([*argv, "--against", "calibrated_flips"]) == 0
    against = capsys.readouterr().out.split("### Against calibrated_flips\n")[1]
    assert "| clinic | finetune | 2 | 30 |" in against
    assert "-0.0100 [-0.0100, -0.0100] | 0% | worse |" in against


def test_each_blend_is_tabled_against_the_arm_it_blends(tmp_path: Path, capsys) -> None:
    study = load_benchmark("study_clinic")
    folder = _study(tmp_path / "model", 0.8)
    arms = json.loads((folder / "results.json").read_text())
    lowg = {i: v + 0.01 for i, v in arms["clinic"]["source"]["scores"].items()}
    arms["clinic"]["lowg"] = {"threshold": 0.5, "scores": lowg}
    blend = {i: v + 0.005 for i, v in lowg.items()}
    arms["clinic"]["wise_lowg"] = {"threshold": 0.5, "blend": 0.5, "scores": blend}
    (folder / "results.json").write_text(json.dumps(arms))
    assert _pooled(study, folder) == 0
    against_lowg = capsys.readouterr().out.split("### Against lowg\n")[1]
    assert "| clinic | wise_lowg | 1 | 30 |" in against_lowg
    assert "+0.0050 [+0.0050, +0.0050] | 100% | better |" in against_lowg
    assert "| clinic | finetune |" not in against_lowg


@pytest.mark.parametrize(
    ("variants", "blend", "message"),
    [
        ("wise_finetune,finetune", "0.5", "list finetune before it"),
        ("finetune,wise_nothing", "0.5", "unknown variant(s) ['wise_nothing']"),
        ("finetune,wise_finetune", "1.5", "--blend 1.5"),
        ("finetune,wise_finetune", "nan", "--blend nan"),
        ("tta_kfold,kfold", "0.5", "tta_kfold scores the folds of kfold: list kfold before it"),
        ("finetune,tta_finetune", "0.5", "flips are chosen out of fold, finetune is no kfold"),
    ],
)
def test_a_blend_needs_its_arm_first_and_a_weight_in_0_1(
    tmp_path: Path,
    trained_checkpoint: Path,
    folder_tree: Path,
    variants: str,
    blend: str,
    message: str,
    capsys,
) -> None:
    study = load_benchmark("study_clinic")
    argv = ["--checkpoint", str(trained_checkpoint), "--output", str(tmp_path / "study")]
    argv += ["--variants", variants, "--blend", blend]
    argv += ["--source", f"tiny={folder_tree / 'images'}:{folder_tree / 'masks'}"]
    with pytest.raises(SystemExit) as exited:
        study.main(argv)
    assert exited.value.code == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "study").exists()


def test_a_variant_may_not_take_the_name_of_the_study_s_own_arms(
    tmp_path: Path, trained_checkpoint: Path, capsys
) -> None:
    study = load_benchmark("study_clinic")
    for name in ("wise_low", "kfold_low", "tta_low"):
        argv = ["--checkpoint", str(trained_checkpoint), "--output", str(tmp_path / "study")]
        argv += ["--define", f"{name}=TRAIN_CONFIG.lr=3e-5", "--variants", "finetune"]
        with pytest.raises(SystemExit) as exited:
            study.main(argv)
        assert exited.value.code == 2
        assert f"--define ['{name}']" in capsys.readouterr().err
    assert not (tmp_path / "study").exists()


def test_a_bad_checkpoint_or_source_is_a_usage_error_before_anything_is_written(
    tmp_path: Path, trained_checkpoint: Path, folder_tree: Path, capsys
) -> None:
    study = load_benchmark("study_clinic")
    good = f"tiny={folder_tree / 'images'}:{folder_tree / 'masks'}"
    cases = [
        (["--checkpoint", str(tmp_path / "missing.ckpt"), "--source", good], "--checkpoint"),
        (["--checkpoint", str(trained_checkpoint), "--source", "tiny=nowhere"], "NAME=IMAGES"),
        (["--checkpoint", str(trained_checkpoint), "--source", good, "--adapt", "500"],
         "need more than --adapt 500"),
    ]  # fmt: skip
    for argv, message in cases:
        with pytest.raises(SystemExit) as exited:
            study.main(["--output", str(tmp_path / "study"), *argv])
        assert exited.value.code == 2
        assert message in capsys.readouterr().err
    assert not (tmp_path / "study").exists()


def test_the_calibration_that_decides_flips_is_tabled_against_the_guarded_one(
    tmp_path: Path, trained_checkpoint: Path, folder_tree: Path, capsys
) -> None:
    from skinet.evaluation.compare import score_samples
    from skinet.evaluation.mask_folders import pair_image_folder
    from skinet.inference.predictor import Predictor

    study = load_benchmark("study_clinic")
    out = tmp_path / "study"
    argv = ["--checkpoint", str(trained_checkpoint), "--output", str(out), "--variants", ""]
    argv += ["--source", f"tiny={folder_tree / 'images'}:{folder_tree / 'masks'}"]
    argv += ["--adapt", "6", "--calibrations", "flips"]  # brings guarded and source_flips
    assert study.main(argv) == 0
    records = json.loads((out / "results.json").read_text())["tiny"]
    assert list(records) == [
        "source", "calibrated", "calibrated_guarded", "calibrated_flips", "source_flips"
    ]  # fmt: skip
    flips = records["calibrated_flips"]
    from skinet.checkpoints.read import load_checkpoint

    calibrated = load_checkpoint(out / "tiny" / "calibrated_flips" / "calibrated.ckpt")
    assert isinstance(flips["tta"], bool) and flips["tta"] == calibrated.tta
    # The arm is scored as its checkpoint predicts: with flips exactly when it chose them.
    check = pair_image_folder(out / "tiny" / "check" / "images", out / "tiny" / "check" / "masks")
    for arm, tta in (("source_flips", True), ("source", False)):
        predictor = Predictor.from_checkpoint(trained_checkpoint, device="cpu", tta=tta)
        assert records[arm]["scores"] == score_samples(predictor, check, False)
    calibrated_path = out / "tiny" / "calibrated_flips" / "calibrated.ckpt"
    as_calibrated = Predictor.from_checkpoint(calibrated_path, device="cpu")
    assert as_calibrated.tta == flips["tta"]
    assert flips["scores"] == score_samples(as_calibrated, check, False)
    text = capsys.readouterr().out
    against = text.split("### Against calibrated_guarded\n")[1]
    assert "| tiny | calibrated_flips |" in against and "source_flips" not in against
    assert "| tiny | source_flips |" in text.split("### Against source\n")[1]


def test_an_unknown_calibration_is_a_usage_error(
    tmp_path: Path, trained_checkpoint: Path, folder_tree: Path, capsys
) -> None:
    study = load_benchmark("study_clinic")
    argv = ["--checkpoint", str(trained_checkpoint), "--output", str(tmp_path / "study")]
    argv += ["--source", f"tiny={folder_tree / 'images'}:{folder_tree / 'masks'}"]
    for calibrations, message in (
        ("guarded,tta", "--calibrations ['tta']: choose from per_image, guarded, flips"),
        ("flips,flips", "each calibration once"),
    ):
        with pytest.raises(SystemExit) as exited:
            study.main([*argv, "--calibrations", calibrations])
        assert exited.value.code == 2
        assert message in capsys.readouterr().err
    assert not (tmp_path / "study").exists()


def test_a_blend_refuses_a_model_that_is_not_a_fine_tuned_copy_of_the_source(
    tmp_path: Path, trained_checkpoint: Path
) -> None:
    study = load_benchmark("study_clinic")
    raw = torch.load(trained_checkpoint, weights_only=False)
    name = next(key for key, value in raw["state_dict"].items() if value.ndim == 4)
    raw["state_dict"][name] = torch.zeros(1, 1, 1, 1)  # another architecture's layer
    other = tmp_path / "other.ckpt"
    torch.save(raw, other)
    base = tmp_path / "finetune"
    (base / "runs" / "run").mkdir(parents=True)
    (base / "runs" / "run" / "metrics.json").write_text(json.dumps({"best_checkpoint": str(other)}))
    (base / "scores.json").write_text(json.dumps({"threshold": 0.5, "scores": {}}))
    arm = tmp_path / "wise_finetune"
    arm.mkdir()
    with pytest.raises(SystemExit, match="is not a fine-tuned copy of") as refused:
        study.blend_arm(trained_checkpoint, base, arm, 0.5)
    assert str(other) in str(refused.value) and str(trained_checkpoint) in str(refused.value)
    assert not list(arm.iterdir())  # nothing blended
