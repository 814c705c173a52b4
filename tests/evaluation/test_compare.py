"""``skinet compare``: paired bootstrap differences of per-image Jaccard, through the CLI."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import cv2
import numpy as np
import pytest
import torch
from tests.helpers.inference import another_source_model, rewrite_checkpoint

from skinet.checkpoints.read import load_checkpoint
from skinet.cli.main import main
from skinet.evaluation.compare import Comparison, Row, compare_scores, comparison_table

SIDE, IMAGES = 20, 12


def _square(removed: int = 0) -> np.ndarray:
    """A 10x10 lesion (100 pixels) with ``removed`` of its pixels cut off (row by row)."""
    mask = np.zeros((SIDE, SIDE), np.uint8)
    mask[5:15, 5:15] = 255
    mask.reshape(-1)[np.flatnonzero(mask)[:removed]] = 0
    return mask


def _labelled(tmp_path: Path) -> tuple[Path, Path]:
    images, masks = tmp_path / "images", tmp_path / "masks"
    images.mkdir()
    masks.mkdir()
    for k in range(IMAGES):
        cv2.imwrite(str(images / f"img{k:02d}.png"), np.full((SIDE, SIDE, 3), 90, np.uint8))
        cv2.imwrite(str(masks / f"img{k:02d}_mask.png"), _square())
    return images, masks


def _predictions(folder: Path, removed: list[int]) -> Path:
    folder.mkdir()
    for k, cut in enumerate(removed):
        cv2.imwrite(str(folder / f"img{k:02d}.png"), _square(cut))
    return folder


def _rows(output: Path) -> dict[str, dict]:
    summary = json.loads((output / "comparison.json").read_text())
    return {row["model"]: row for row in summary["rows"]}


def test_compare_prints_a_known_difference_inside_its_interval(tmp_path: Path, capsys) -> None:
    images, masks = _labelled(tmp_path)
    cuts = [0, 5, 10, 20, 0, 30, 5, 10, 0, 15, 25, 40]  # Jaccard (100 - cut) / 100 per image
    a = _predictions(tmp_path / "a", [0] * IMAGES)
    b = _predictions(tmp_path / "b", cuts)
    output = tmp_path / "out"
    code = main(["compare", f"A={a}", f"B={b}", "--external", f"clinic={images}:{masks}",
                 "-o", str(output)])  # fmt: skip
    assert code == 0
    expected = -float(np.mean(cuts)) / 100
    row = _rows(output)["B"]
    assert row["difference"] == pytest.approx(expected)
    assert row["low"] <= expected <= row["high"] and row["low"] < row["high"] < 0
    assert row["verdict"] == "worse"
    assert row["better_share"] == 0.0
    printed = capsys.readouterr().out
    assert f"{expected:+.4f} [{row['low']:+.4f}, {row['high']:+.4f}]" in printed
    table = (output / "comparison.md").read_text()
    assert table.startswith("| set | model |")
    assert "mean of the sets" not in table  # one set: no pooled row, and no note on one
    assert len((output / "per_image.csv").read_text().splitlines()) == 1 + 2 * IMAGES
    # Two sets: the pooled row, and the note on how it weighs them.
    again = tmp_path / "again"
    assert main(["compare", f"A={a}", f"B={b}", "--external", f"one={images}:{masks}",
                 "--external", f"two={images}:{masks}", "-o", str(again)]) == 0  # fmt: skip
    table = (again / "comparison.md").read_text()
    assert "| mean of the sets | B |" in table and "'mean of the sets': every set weighs" in table


def test_identical_prediction_folders_give_zero(tmp_path: Path, capsys) -> None:
    images, masks = _labelled(tmp_path)
    a = _predictions(tmp_path / "a", [3 * k for k in range(IMAGES)])
    b = _predictions(tmp_path / "b", [3 * k for k in range(IMAGES)])
    output = tmp_path / "out"
    assert main(["compare", str(a), str(b), "--external", f"s={images}:{masks}",
                 "-o", str(output)]) == 0  # fmt: skip
    row = _rows(output)["b"]
    assert (row["difference"], row["low"], row["high"]) == (0.0, 0.0, 0.0)
    assert row["verdict"] == "no difference"
    assert "+0.0000 [+0.0000, +0.0000]" in capsys.readouterr().out


def test_a_bound_that_is_not_zero_is_not_printed_as_zero(tmp_path: Path, capsys) -> None:
    """B is better on every image by one pixel of a 50000-pixel lesion (+0.00002): four
    decimals would print "+0.0000 [+0.0000, +0.0000]" next to "better"."""
    images, masks, a, b = (tmp_path / name for name in ("images", "masks", "a", "b"))
    for folder in (images, masks, a, b):
        folder.mkdir()
    lesion = np.zeros((220, 270), np.uint8)
    lesion[10:210, 10:260] = 255
    one_pixel_short = lesion.copy()
    one_pixel_short[10, 10] = 0
    for k in range(3):
        cv2.imwrite(str(images / f"img{k}.png"), np.full((*lesion.shape, 3), 90, np.uint8))
        cv2.imwrite(str(masks / f"img{k}_mask.png"), lesion)
        cv2.imwrite(str(a / f"img{k}.png"), one_pixel_short)
        cv2.imwrite(str(b / f"img{k}.png"), lesion)
    output = tmp_path / "out"
    assert main(["compare", str(a), str(b), "--external", f"s={images}:{masks}",
                 "-o", str(output)]) == 0  # fmt: skip
    row = _rows(output)["b"]
    assert row["low"] == pytest.approx(1 / 50000) and row["verdict"] == "better"
    line = "+0.00002 [+0.00002, +0.00002] | 100% | better"
    assert line in capsys.readouterr().out
    assert line in (output / "comparison.md").read_text()


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        (0.0, "+0.0000"),
        (-0.0, "+0.0000"),
        (0.0123, "+0.0123"),
        (-0.00004, "-0.00004"),
        (0.00005, "+0.0001"),
        (-3e-7, "-0.0000003"),
        (1e-17, "+1e-17"),
    ],
)
def test_figures_in_the_table_show_their_sign(value: float, shown: str) -> None:
    rows = [Row("s", "a", 1, 3, 0.8), Row("s", "b", 1, 3, 0.8, value, value, 0.01, 0.5)]
    table = comparison_table(Comparison(rows, 0.95, 100, 0, {}))
    assert f"| {shown} [{shown}, +0.0100] |" in table


def test_checkpoints_and_seeds_on_a_split(trained_checkpoint: Path, tmp_path: Path) -> None:
    # Another model: the same weights with the last layer's bias lowered (smaller masks).
    checkpoint = torch.load(trained_checkpoint, map_location="cpu", weights_only=True)
    bias = [name for name in checkpoint["state_dict"] if name.endswith("bias")][-1]
    checkpoint["state_dict"][bias] = checkpoint["state_dict"][bias] - 1.0
    other = tmp_path / "other.ckpt"
    torch.save(checkpoint, other)
    output = tmp_path / "out"
    pair = f"{trained_checkpoint},{other}"
    assert main(["compare", f"one={trained_checkpoint}", f"other={other}", f"two={pair}",
                 "--split", "test", "-o", str(output), "--draws", "200"]) == 0  # fmt: skip
    rows = _rows(output)
    assert rows["other"]["difference"] != 0.0, "the two models agree: the test proves nothing"
    # Two runs of a model: their mean per image, so halfway between the two models.
    assert rows["two"]["runs"] == 2 and rows["two"]["images"] == rows["one"]["images"] >= 1
    assert rows["two"]["mean"] == pytest.approx((rows["one"]["mean"] + rows["other"]["mean"]) / 2)
    assert rows["two"]["difference"] == pytest.approx(rows["other"]["difference"] / 2)


def test_seeds_widen_the_interval() -> None:
    rng = np.random.default_rng(0)
    base = {f"i{k}": float(v) for k, v in enumerate(rng.uniform(0.5, 0.9, 200))}
    shifted = {key: value + 0.01 for key, value in base.items()}
    noisy = {key: value + 0.04 for key, value in base.items()}
    one = compare_scores({"s": {"A": [base], "B": [shifted]}}, draws=2000)
    two = compare_scores({"s": {"A": [base, base], "B": [shifted, noisy]}}, draws=2000)
    narrow, wide = one.rows[1], two.rows[1]
    assert narrow.high - narrow.low < 1e-9  # one run each: a constant difference
    assert wide.low == pytest.approx(0.01) and wide.high == pytest.approx(0.04)
    assert wide.difference == pytest.approx(0.025)


def test_paired_runs_keep_the_spread_between_pairs_out_of_the_interval(tmp_path: Path) -> None:
    # Three source models 0.10 apart; fine-tuning each adds 0.02 to every image. Resampled on
    # their own, the runs hold 0 in the interval; resampled as pairs, the difference is 0.02.
    images, masks = _labelled(tmp_path)
    sources, tuned = [], []
    for run, base in enumerate((0, 10, 20)):
        sources.append(_predictions(tmp_path / f"source{run}", [base + 2] * IMAGES))
        tuned.append(_predictions(tmp_path / f"tuned{run}", [base] * IMAGES))
    runs = {"source": ",".join(map(str, sources)), "tuned": ",".join(map(str, tuned))}
    argv = ["compare", f"source={runs['source']}", f"tuned={runs['tuned']}",
            "--external", f"clinic={images}:{masks}", "--draws", "2000"]  # fmt: skip
    assert main([*argv, "-o", str(tmp_path / "apart")]) == 0
    apart = _rows(tmp_path / "apart")["tuned"]
    assert apart["low"] < 0 < apart["high"] and apart["verdict"] == "no difference"
    assert main([*argv, "--paired-runs", "-o", str(tmp_path / "paired")]) == 0
    paired = _rows(tmp_path / "paired")["tuned"]
    assert paired["difference"] == pytest.approx(0.02)
    assert paired["low"] == pytest.approx(0.02) and paired["high"] == pytest.approx(0.02)
    assert paired["verdict"] == "better"
    summary = json.loads((tmp_path / "paired" / "comparison.json").read_text())
    assert summary["paired_runs"] is True
    assert "run i of every model together" in (tmp_path / "paired" / "comparison.md").read_text()


def test_paired_runs_need_as_many_runs_of_every_model(tmp_path: Path, capsys) -> None:
    images, masks = _labelled(tmp_path)
    a = _predictions(tmp_path / "a", [0] * IMAGES)
    b = _predictions(tmp_path / "b", [5] * IMAGES)
    code = main(["compare", f"A={a},{a}", f"B={b}", "--paired-runs", "--external",
                 f"s={images}:{masks}", "-o", str(tmp_path / "out")])  # fmt: skip
    assert code == 2
    captured = capsys.readouterr()
    assert "--paired-runs needs as many runs" in captured.out + captured.err
    assert "scoring" not in captured.out + captured.err  # refused before any work
    with pytest.raises(ValueError, match="paired runs need as many runs"):
        compare_scores({"s": {"A": [{"x": 1.0}] * 2, "B": [{"x": 1.0}]}}, paired_runs=True)
    assert not (tmp_path / "out" / "comparison.md").exists()


def _calibrated(source: Path, output: Path) -> Path:
    argv = ["evaluate", "--checkpoint", str(source), "--split", "val", "--tune-threshold",
            "--save-calibrated", str(output), "--output", str(output.with_suffix(""))]  # fmt: skip
    assert main(argv) == 0
    return output


def test_paired_runs_refuse_runs_of_different_source_models(
    trained_checkpoint: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Run i of a calibrated or fine-tuned model must come from run i of the source models."""
    first = trained_checkpoint
    second = another_source_model(first, tmp_path / "b.ckpt")
    cal_first = _calibrated(first, tmp_path / "cal_a.ckpt")
    cal_second = _calibrated(second, tmp_path / "cal_b.ckpt")
    config = load_checkpoint(first).payload.config  # as if fine-tuned from the second
    config["TRAIN_CONFIG"] = {**config["TRAIN_CONFIG"], "init_checkpoint": str(second)}
    rewrite_checkpoint(first, tmp_path / "tuned_from_b.ckpt", config=config)
    caplog.clear()

    def compare(*models: str, output: str, extra: tuple[str, ...] = ()) -> int:
        return main(["compare", *models, "--paired-runs", "--split", "test", *extra,
                     "-o", str(tmp_path / output)])  # fmt: skip

    swapped = (f"source={first},{second}", f"calibrated={cal_second},{cal_first}")
    assert compare(*swapped, output="swapped") == 2
    said = caplog.text
    assert "run 1 of every model, but those runs come from different source models" in said
    assert f"source: {first}" in said and f"calibrated: {second}" in said
    assert "scoring" not in said  # refused before any work
    assert not (tmp_path / "swapped").exists()
    # --threshold replaces the calibrated threshold, not where the copy came from
    assert compare(*swapped, output="given", extra=("--threshold", "0.5")) == 2
    caplog.clear()
    assert compare(f"source={first}", f"tuned={tmp_path / 'tuned_from_b.ckpt'}", output="ft") == 2
    assert f"tuned: {second}" in caplog.text
    # in order, and a copy of a source is the same source
    copy = tmp_path / "copy_of_a.ckpt"
    copy.write_bytes(first.read_bytes())
    in_order = (f"source={copy},{second}", f"calibrated={cal_first},{cal_second}")
    assert compare(*in_order, output="in_order") == 0
    assert (tmp_path / "in_order" / "comparison.md").is_file()
    # models trained on their own are paired by seed: nothing to check
    assert compare(f"A={first},{second}", f"B={second},{first}", output="own") == 0


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["A=x"], "two models or more"),
        (["A=x", "A=y"], "model names must differ"),
        (["A=x", "B=y"], "nothing to score"),
    ],
)
def test_bad_compare_arguments_exit_2(tmp_path: Path, argv, message, capsys) -> None:
    for name in ("x", "y"):
        (tmp_path / name).mkdir()
    argv = [a.replace("=x", f"={tmp_path / 'x'}").replace("=y", f"={tmp_path / 'y'}") for a in argv]
    assert main(["compare", *argv]) == 2
    captured = capsys.readouterr()
    assert message in captured.out + captured.err


def test_model_arguments_with_equals_signs_in_checkpoint_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from skinet.cli.compare import model_spec

    ckpt = tmp_path / "run" / "checkpoints" / "best-epoch=003.ckpt"
    ckpt.parent.mkdir(parents=True)
    ckpt.write_bytes(b"")
    assert model_spec(str(ckpt)).paths == (ckpt,) and model_spec(str(ckpt)).name == "run"
    named = model_spec(f"ema={ckpt},{ckpt}")
    assert named.name == "ema" and named.paths == (ckpt, ckpt)
    # The shell expands no pattern after NAME=: compare does, each match a run.
    other = tmp_path / "run2" / "checkpoints" / "best-epoch=001.ckpt"
    other.parent.mkdir(parents=True)
    other.write_bytes(b"")
    assert model_spec(f"ema={tmp_path}/run/checkpoints/best-*.ckpt").paths == (ckpt,)
    assert model_spec(f"ema={tmp_path}/run*/checkpoints/best-*.ckpt").paths == (ckpt, other)
    with pytest.raises(argparse.ArgumentTypeError, match="no file matches"):
        model_spec(f"ema={tmp_path}/nothing_*/best.ckpt")
    # A pattern whose own text holds '=' is paths when it matches as it stands, not NAME=*.ckpt.
    (ckpt.parent / "last.ckpt").write_bytes(b"")
    monkeypatch.chdir(ckpt.parent)
    relative = model_spec("best-epoch=*.ckpt")
    assert relative.paths == (Path(ckpt.name),) and relative.name == "run"


def test_a_cv_folder_is_compared_as_the_ensemble_of_its_folds(
    trained_checkpoint: Path, tmp_path: Path
) -> None:
    # Two folds of one model: the ensemble's probabilities are the model's own. At the model's
    # threshold the two are the same model; at the threshold the cv chose (its
    # cv_results.json) they are scored as `skinet evaluate` scores that cv folder.
    cv_dir = tmp_path / "cv_tiny_k2"
    (cv_dir / "results").mkdir(parents=True)
    for fold in (1, 2):
        record = {"fold": fold, "best_checkpoint": str(trained_checkpoint)}
        (cv_dir / "results" / f"fold_{fold}.json").write_text(json.dumps(record))
    argv = ["compare", f"single={trained_checkpoint}", f"folds={cv_dir}", "--split", "test",
            "--draws", "200"]  # fmt: skip
    assert main([*argv, "-o", str(tmp_path / "same")]) == 0
    same = _rows(tmp_path / "same")["folds"]
    assert same["images"] >= 1 and same["difference"] == 0.0

    chosen = {"value": 0.2, "selection": "pooled_dice", "num_images": 8, "tuned_on": "oof"}
    (cv_dir / "cv_results.json").write_text(json.dumps({"ensemble_threshold": chosen}))
    assert main([*argv, "-o", str(tmp_path / "chosen")]) == 0
    folds = _rows(tmp_path / "chosen")["folds"]
    evaluate = ["evaluate", "--checkpoint", str(cv_dir), "--split", "test", "--gallery", "0"]
    assert main([*evaluate, "--output", str(tmp_path / "evaluated")]) == 0
    summary = json.loads((tmp_path / "evaluated" / "summary.json").read_text())
    assert summary["threshold"] == pytest.approx(0.2)
    assert folds["mean"] == pytest.approx(summary["mean_jaccard"])
    assert folds["difference"] != 0.0  # the cv's threshold, not the model's


def test_two_sets_of_one_name_are_refused(tmp_path: Path, capsys) -> None:
    folder = tmp_path / "images"
    folder.mkdir()
    external = f"s={folder}:{folder}"
    argv = ["compare", f"A={folder}", f"B={folder}", "--external", external]
    assert main([*argv, "--external", external, "--output", str(tmp_path / "out")]) == 2
    captured = capsys.readouterr()
    assert "two sets are named 's'" in captured.out + captured.err
    assert not (tmp_path / "out").exists()


def test_options_set_the_prediction_flags_of_one_model(
    trained_checkpoint: Path, synthetic_root: Path, tmp_path: Path, capsys, caplog
) -> None:
    # One checkpoint three ways: as it is, with --options 'flips=--tta', and the masks
    # `skinet predict --tta` wrote. The second is scored as the third, image by image.
    images = synthetic_root / "ISIC-2017_Training_Data"
    masks = synthetic_root / "ISIC-2017_Training_Part1_GroundTruth"
    predicted = tmp_path / "predicted"
    argv = ["predict", "--checkpoint", str(trained_checkpoint), "--images", str(images)]
    assert main([*argv, "--output", str(predicted), "--tta"]) == 0
    models = [f"plain={trained_checkpoint}", f"flips={trained_checkpoint}", f"written={predicted}"]
    argv = ["compare", *models, "--external", f"train={images}:{masks}", "--draws", "200"]
    assert main([*argv, "--options", "flips=--tta", "-o", str(tmp_path / "out")]) == 0
    assert "flips: predicted with --tta (--options)" in caplog.text
    rows = _rows(tmp_path / "out")
    assert rows["flips"]["difference"] != 0.0, "flips change nothing here: the test proves nothing"
    assert rows["flips"]["mean"] == pytest.approx(rows["written"]["mean"], abs=1e-12)
    assert rows["flips"]["difference"] == pytest.approx(rows["written"]["difference"], abs=1e-12)
    summary = json.loads((tmp_path / "out" / "comparison.json").read_text())
    assert summary["models"]["flips"] == {"paths": [str(trained_checkpoint)], "options": "--tta"}
    assert "options" not in summary["models"]["plain"]
    table = (tmp_path / "out" / "comparison.md").read_text()
    assert "Predicted with: flips: `--tta` (`--options`)." in table
    every = "plain=--no-tta --threshold 0.3 --keep-largest --fill-holes"
    assert main([*argv, "--options", every, "-o", str(tmp_path / "every")]) == 0
    summary = json.loads((tmp_path / "every" / "comparison.json").read_text())
    flags = "--threshold 0.3 --no-tta --keep-largest --fill-holes"
    assert summary["models"]["plain"]["options"] == flags
    assert _rows(tmp_path / "every")["flips"]["difference"] != rows["flips"]["difference"]
    capsys.readouterr()

    # Refused before anything is scored: a name no model has, a flag predict does not take
    # per model, flags for a folder of masks, one model's flags given twice.
    for options, message in [
        (["--options", "nobody=--tta"], "no model is named 'nobody'"),
        (["--options", "flips=--device cpu"], "unknown --device cpu"),
        (["--options", "flips=--t"], "unknown --t"),
        (["--options", "flips=--threshold 2"], "flips: argument --threshold"),
        (["--options", "written=--tta"], "a folder of predicted masks, which no flag changes"),
        (["--options", "flips=--tta", "--options", "flips=--fill-holes"], "given twice"),
    ]:
        output = tmp_path / "refused"
        caplog.clear()
        try:
            code = main([*argv, *options, "-o", str(output)])
        except SystemExit as exit_:  # argparse's own usage errors
            code = exit_.code
        assert code == 2, options
        captured = capsys.readouterr()
        said = captured.out + captured.err + caplog.text
        assert message in said, (options, said)
        assert not output.exists()
