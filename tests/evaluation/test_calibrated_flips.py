"""``evaluate --tune-tta``: flips at prediction time decided on a clinic's labelled images, kept
by a calibrated checkpoint and used by predict, evaluate and export."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import cv2
import numpy as np
import pytest
import torch
from tests.helpers.inference import run_cli

from skinet.checkpoints.calibrated_card import CALIBRATION_HEADING
from skinet.checkpoints.format import CHECKPOINT_KEY, CheckpointError
from skinet.checkpoints.read import load_checkpoint
from skinet.inference.ensemble import EnsemblePredictor
from skinet.inference.predictor import Predictor
from skinet.metrics.threshold_counts import guard_interval


def _drawn_by(
    checkpoint: Path, synthetic_root: Path, folder: Path, tta: bool
) -> tuple[Path, Path, int]:
    """Every synthetic image, with masks drawn by the model itself at its own threshold,
    with or without flips: a clinic on which exactly that way of predicting is perfect.

    Returns the images, the masks, and on how many images the two ways differ."""
    images, masks = folder / "images", folder / "masks"
    images.mkdir(parents=True)
    masks.mkdir(parents=True)
    for path in sorted(synthetic_root.glob("ISIC-2017_*_Data/*.jpg")):
        shutil.copy(path, images / path.name)
    paths = sorted(images.glob("*.jpg"))
    pictures = [cv2.cvtColor(cv2.imread(str(p)), cv2.COLOR_BGR2RGB) for p in paths]
    drawn = Predictor.from_checkpoint(checkpoint, tta=tta).predict_batch(pictures)
    other = Predictor.from_checkpoint(checkpoint, tta=not tta).predict_batch(pictures)
    for path, mask in zip(paths, drawn, strict=True):
        cv2.imwrite(str(masks / f"{path.stem}_segmentation.png"), mask * 255)
    differ = sum(not np.array_equal(a, b) for a, b in zip(drawn, other, strict=True))
    return images, masks, differ


def _tune(checkpoint: Path, images: Path, masks: Path, out: Path, *extra: str) -> int:
    return run_cli(
        ["evaluate", "--checkpoint", str(checkpoint), "--images", str(images)]
        + ["--masks", str(masks), "--tune-threshold", "--threshold-selection", "guarded"]
        + ["--tune-tta", "--output", str(out), *extra]
    )


def _calibrate_again(
    checkpoint: Path, images: Path, masks: Path, output: Path, flips: str
) -> dict[str, object]:
    """``evaluate --tune-threshold --threshold-selection guarded`` with ``flips`` (``--tta`` or
    ``--no-tta``) saved to ``output``; its calibration record."""
    argv = ["evaluate", "--checkpoint", str(checkpoint), "--images", str(images), "--masks"]
    argv += [str(masks), "--tune-threshold", "--threshold-selection", "guarded", flips]
    argv += ["--save-calibrated", str(output), "--output", str(output.with_suffix(""))]
    assert run_cli(argv) == 0
    record = load_checkpoint(output).payload.calibration
    assert record is not None
    return dict(record)


def test_flips_are_chosen_when_clearly_better_and_then_used_by_predict_and_export(
    tmp_path: Path,
    trained_checkpoint: Path,
    synthetic_root: Path,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    images, masks, differ = _drawn_by(trained_checkpoint, synthetic_root, tmp_path / "c", True)
    assert differ >= 12, "flips barely change this model's masks: the test would prove nothing"
    calibrated = tmp_path / "clinic.ckpt"
    assert _tune(trained_checkpoint, images, masks, tmp_path / "tuned", "--save-calibrated",
                 str(calibrated)) == 0  # fmt: skip
    printed = re.sub(r"\s+", " ", capsys.readouterr().out)
    assert "flips at prediction time on" in printed and ": flips on" in printed
    # The export is one pass: the line on what uses the copy says so.
    assert "flips on; predict and evaluate use both, an export the threshold only" in caplog.text
    record = load_checkpoint(calibrated).payload.calibration
    assert record is not None and record["tta"] is True and record["selection"] == "guarded"
    # Both ways kept the model's own threshold, the one the masks were drawn at (--no-tta below
    # predicts at the one without flips).
    assert record["threshold_without_tta"] == record["threshold"] == record["source_threshold"]
    low, high = record["tta_interval"]
    assert 0.0 < low <= record["tta_gain"] <= high
    summary = json.loads((tmp_path / "tuned" / "summary.json").read_text())
    assert summary["tta"] is True and summary["mean_jaccard"] == pytest.approx(1.0)

    # predict uses the flips the calibration chose (the masks were drawn with them); --no-tta not.
    caplog.clear()
    assert run_cli(["predict", "--checkpoint", str(calibrated), "--images", str(images),
                    "--output", str(tmp_path / "flipped")]) == 0  # fmt: skip
    assert "16 images, tuned with flips); flips at prediction time (as calibrated)" in caplog.text
    assert json.loads((tmp_path / "flipped" / "predictions.json").read_text())["tta"] is True
    caplog.clear()
    assert run_cli(["predict", "--checkpoint", str(calibrated), "--images", str(images),
                    "--output", str(tmp_path / "plain"), "--no-tta"]) == 0  # fmt: skip
    assert "16 images, without the flips it chose) (--no-tta)" in caplog.text
    assert json.loads((tmp_path / "plain" / "predictions.json").read_text())["tta"] is False
    same = {"flipped": 0, "plain": 0}
    for truth in masks.glob("*.png"):
        name = truth.name.replace("_segmentation.png", "_mask.png")
        for folder in same:
            written = cv2.imread(str(tmp_path / folder / name), cv2.IMREAD_GRAYSCALE)
            same[folder] += int(np.array_equal(written > 0, cv2.imread(str(truth))[..., 0] > 0))
    assert same == {"flipped": 16, "plain": 16 - differ}

    # evaluate scores with flips too; the card and the export sidecar say so.
    assert run_cli(["evaluate", "--checkpoint", str(calibrated), "--images", str(images),
                    "--masks", str(masks), "--output", str(tmp_path / "again")]) == 0  # fmt: skip
    assert json.loads((tmp_path / "again" / "summary.json").read_text())["tta"] is True
    card = calibrated.with_name("clinic.ckpt.MODEL_CARD.md").read_text()
    assert CALIBRATION_HEADING in card and "Flips at prediction time **on**" in card
    assert "`skinet evaluate --tune-threshold --threshold-selection guarded` on" in card
    caplog.clear()
    exported = tmp_path / "model.pt"
    assert run_cli(["export", "--checkpoint", str(calibrated), "--format", "torchscript",
                    "--output", str(exported)]) == 0  # fmt: skip
    assert json.loads(exported.with_name("model.pt.json").read_text())["tta"] is True
    assert "which the exported graph does not do" in caplog.text

    # Calibrated again without --tune-tta: tuned with the flips it carries, and kept with them.
    again = tmp_path / "again.ckpt"
    assert run_cli(["evaluate", "--checkpoint", str(calibrated), "--images", str(images),
                    "--masks", str(masks), "--tune-threshold", "--save-calibrated", str(again),
                    "--output", str(tmp_path / "recalibrated")]) == 0  # fmt: skip
    assert load_checkpoint(again).tta is True
    kept = load_checkpoint(again).payload.calibration
    assert kept is not None and kept["tta_interval"] == record["tta_interval"]
    assert "threshold_without_tta" not in kept  # tuned with flips only: no other way to keep
    assert "chosen by `--tune-tta`" in again.with_name("again.ckpt.MODEL_CARD.md").read_text()
    # Given --tta on an uncalibrated model, the copy predicts with flips too, without figures.
    given = tmp_path / "given.ckpt"
    argv = ["evaluate", "--checkpoint", str(trained_checkpoint), "--images", str(images)]
    argv += ["--masks", str(masks), "--tune-threshold", "--tta", "--save-calibrated", str(given)]
    assert run_cli([*argv, "--output", str(tmp_path / "given")]) == 0
    assert load_checkpoint(given).tta is True
    assert "as the threshold was tuned" in given.with_name("given.ckpt.MODEL_CARD.md").read_text()


def test_no_tta_predicts_at_the_threshold_the_calibration_chose_without_flips(
    tmp_path: Path,
    trained_checkpoint: Path,
    synthetic_root: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    images, masks, _ = _drawn_by(trained_checkpoint, synthetic_root, tmp_path / "c", True)
    calibrated = tmp_path / "clinic.ckpt"
    assert _tune(trained_checkpoint, images, masks, tmp_path / "tuned", "--save-calibrated",
                 str(calibrated)) == 0  # fmt: skip
    record = load_checkpoint(calibrated).payload.calibration
    assert record is not None and record["tta"] is True
    assert record["threshold_with_tta"] == record["threshold"]
    assert 0.0 <= record["threshold_without_tta"] <= 1.0
    # The same images tuned without flips may land on the same value: a record that chose
    # another one shows which of the two --no-tta predicts at.
    raw = torch.load(calibrated, weights_only=False)
    plain = 0.3 if record["threshold"] != pytest.approx(0.3) else 0.7
    raw[CHECKPOINT_KEY]["calibration"]["threshold_without_tta"] = plain
    edited = tmp_path / "edited.ckpt"
    torch.save(raw, edited)

    def predicted_threshold(tta: str, out: str) -> dict[str, object]:
        caplog.clear()
        argv = ["predict", "--checkpoint", str(edited), "--images", str(images)]
        assert run_cli([*argv, "--output", str(tmp_path / out), *([tta] if tta else [])]) == 0
        chosen: dict[str, object] = json.loads((tmp_path / out / "predictions.json").read_text())
        return chosen["threshold"]  # type: ignore[return-value]

    without = predicted_threshold("--no-tta", "plain")
    assert without["value"] == pytest.approx(plain) and without["source"] == "calibrated"
    assert "16 images, without the flips it chose) (--no-tta)" in caplog.text
    assert Predictor.from_checkpoint(edited, tta=False).threshold == pytest.approx(plain)
    chosen = predicted_threshold("", "flipped")
    assert chosen["value"] == pytest.approx(record["threshold"])
    assert "flips at prediction time (as calibrated)" in caplog.text
    # An export is one view, but its sidecar says to average the flips (tta: true): the
    # sidecar and the card both give the threshold tuned with them.
    exported = tmp_path / "edited.pt"
    argv = ["export", "--checkpoint", str(edited), "--format", "torchscript", "--output"]
    assert run_cli([*argv, str(exported)]) == 0
    sidecar = json.loads(exported.with_name("edited.pt.json").read_text())
    assert sidecar["tta"] is True and sidecar["threshold"] == pytest.approx(record["threshold"])
    output_line = next(
        line
        for line in exported.with_name("edited.pt.MODEL_CARD.md").read_text().splitlines()
        if line.startswith("- Output")
    )
    assert f"{record['threshold']:.4f}" in output_line and f"{plain:.4f}" not in output_line
    # Given --threshold, that value wins either way.
    assert Predictor.from_checkpoint(edited, threshold=0.61, tta=False).threshold == 0.61
    # An ensemble of such members predicts from one view unless given --tta: at the mean of
    # their thresholds tuned that way.
    pair = [edited, edited]
    assert EnsemblePredictor.from_checkpoints(pair).threshold == pytest.approx(plain)
    argv = ["predict", "--checkpoint", str(edited), str(edited), "--images", str(images)]
    caplog.clear()
    assert run_cli([*argv, "--output", str(tmp_path / "pair")]) == 0
    ensemble = json.loads((tmp_path / "pair" / "predictions.json").read_text())
    assert ensemble["threshold"]["value"] == pytest.approx(plain) and ensemble["tta"] is False
    assert "a member calibrated with flips brings its threshold tuned without them" in caplog.text
    with_flips = EnsemblePredictor.from_checkpoints(pair, tta=True)
    assert with_flips.threshold == pytest.approx(record["threshold"])
    # Calibrated again without flips: its source's own threshold is the one without them.
    recalibrated = _calibrate_again(edited, images, masks, tmp_path / "again.ckpt", "--no-tta")
    assert recalibrated["source_threshold"] == pytest.approx(plain)
    assert "tta" not in recalibrated and "threshold_without_tta" not in recalibrated
    card = calibrated.with_name("clinic.ckpt.MODEL_CARD.md").read_text()
    without_figure = f"predicts at {record['threshold_without_tta']:.4f}"
    assert without_figure in card
    # A threshold out of [0, 1] is refused when the checkpoint is read.
    raw[CHECKPOINT_KEY]["calibration"]["threshold_without_tta"] = 1.5
    torch.save(raw, tmp_path / "bad.ckpt")
    with pytest.raises(CheckpointError, match=r"\['threshold_without_tta'\] must be a threshold"):
        load_checkpoint(tmp_path / "bad.ckpt")


def test_flips_stay_off_without_a_clear_gain_and_tta_predicts_at_the_threshold_tuned_with_them(
    tmp_path: Path,
    trained_checkpoint: Path,
    synthetic_root: Path,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    images, masks, differ = _drawn_by(trained_checkpoint, synthetic_root, tmp_path / "c", False)
    assert differ >= 12
    calibrated = tmp_path / "clinic.ckpt"
    assert _tune(trained_checkpoint, images, masks, tmp_path / "tuned", "--save-calibrated",
                 str(calibrated)) == 0  # fmt: skip
    assert ": flips off (no clear gain)" in re.sub(r"\s+", " ", capsys.readouterr().out)
    record = load_checkpoint(calibrated).payload.calibration
    assert record is not None and record["tta"] is False and record["tta_gain"] < 0
    assert Predictor.from_checkpoint(calibrated).tta is False
    assert Predictor.from_checkpoint(calibrated, tta=True).tta is True
    card = calibrated.with_name("clinic.ckpt.MODEL_CARD.md").read_text()
    assert "Flips at prediction time off" in card
    assert f"`--tta` turns them on and predicts at {record['threshold_with_tta']:.4f}" in card
    # --tta predicts at the threshold the same images chose with flips: a record that chose
    # another one than the threshold without them shows which.
    raw = torch.load(calibrated, weights_only=False)
    flipped = 0.3 if record["threshold"] != pytest.approx(0.3) else 0.7
    raw[CHECKPOINT_KEY]["calibration"]["threshold_with_tta"] = flipped
    edited = tmp_path / "edited.ckpt"
    torch.save(raw, edited)
    caplog.clear()
    argv = ["predict", "--checkpoint", str(edited), "--images", str(images), "--output"]
    assert run_cli([*argv, str(tmp_path / "flipped"), "--tta"]) == 0
    predicted = json.loads((tmp_path / "flipped" / "predictions.json").read_text())
    assert predicted["tta"] is True and predicted["threshold"]["value"] == pytest.approx(flipped)
    assert predicted["threshold"]["calibration"]["with_tta"] is True
    assert "tuned with the flips it did not choose); flips at prediction time (--tta)" in (
        caplog.text
    )
    assert run_cli([*argv, str(tmp_path / "plain")]) == 0
    predicted = json.loads((tmp_path / "plain" / "predictions.json").read_text())
    assert predicted["tta"] is False
    assert predicted["threshold"]["value"] == pytest.approx(record["threshold"])
    pair = EnsemblePredictor.from_checkpoints([edited, edited], tta=True).threshold_choice
    assert pair.value == pytest.approx(flipped)
    assert "a member calibrated without flips brings its threshold tuned with them" in (
        pair.describe()
    )
    # Calibrated again with --tta: its source's own threshold is the one tuned with flips.
    recalibrated = _calibrate_again(edited, images, masks, tmp_path / "again.ckpt", "--tta")
    assert recalibrated["source_threshold"] == pytest.approx(flipped)
    # Calibrated again with --tune-tta on images where flips win: the guarded rule keeps each
    # way's own threshold unless the gain is clear, and the record names the one it kept.
    flipped_images, flipped_masks, _ = _drawn_by(
        trained_checkpoint, synthetic_root, tmp_path / "flipped_clinic", True
    )
    capsys.readouterr()
    again = tmp_path / "again_flips.ckpt"
    assert _tune(edited, flipped_images, flipped_masks, tmp_path / "t2", "--save-calibrated",
                 str(again)) == 0  # fmt: skip
    printed = re.sub(r"\s+", " ", capsys.readouterr().out)
    recalibrated = load_checkpoint(again).payload.calibration
    assert recalibrated is not None and recalibrated["tta"] is True
    assert recalibrated["source_threshold"] == pytest.approx(flipped)
    kept = recalibrated["threshold"] == pytest.approx(recalibrated["source_threshold"])
    assert kept == ("(the model's own: no clear gain" in printed), printed
    # A record whose choice is not true or false is refused, not read as one.
    raw[CHECKPOINT_KEY]["calibration"]["tta"] = "yes"
    torch.save(raw, tmp_path / "bad.ckpt")
    with pytest.raises(CheckpointError, match=r"\['tta'\] must be true or false"):
        load_checkpoint(tmp_path / "bad.ckpt")


def test_five_images_that_all_gain_from_flips_are_no_clear_gain(
    tmp_path: Path,
    trained_checkpoint: Path,
    synthetic_root: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    images, masks, _ = _drawn_by(trained_checkpoint, synthetic_root, tmp_path / "c", True)
    few_images, few_masks = tmp_path / "few" / "images", tmp_path / "few" / "masks"
    few_images.mkdir(parents=True)
    few_masks.mkdir()
    for path in sorted(images.glob("*.jpg"))[:5]:
        shutil.copy(path, few_images / path.name)
        shutil.copy(masks / f"{path.stem}_segmentation.png", few_masks)
    assert _tune(trained_checkpoint, few_images, few_masks, tmp_path / "tuned") == 0
    printed = re.sub(r"\s+", " ", capsys.readouterr().out)
    assert "(5 images): " in printed
    assert ": flips off (no clear gain on fewer than 6 images)" in printed
    # Every one of the five gains: the interval alone would call it clear.
    found = re.search(r"Jaccard \+\S+ \[([+-][\d.]+), ([+-][\d.]+)\]", printed)
    assert found is not None and float(found[1]) > 0, printed
    assert json.loads((tmp_path / "tuned" / "summary.json").read_text())["tta"] is False


def test_an_unreadable_image_is_left_out_of_both_passes_and_reported_once(
    tmp_path: Path,
    trained_checkpoint: Path,
    synthetic_root: Path,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    images, masks, _ = _drawn_by(trained_checkpoint, synthetic_root, tmp_path / "c", True)
    (images / "broken.jpg").write_bytes(b"not an image")
    shutil.copy(next(masks.glob("*.png")), masks / "broken_segmentation.png")
    code = _tune(trained_checkpoint, images, masks, tmp_path / "tuned")
    assert code == 1  # the broken image is a failure of the evaluation, as without --tune-tta
    printed = re.sub(r"\s+", " ", capsys.readouterr().out)
    assert "(16 images; 1 left out, see above)" in printed and ": flips on" in printed
    assert caplog.text.count("tuning the threshold without 1 image(s)") == 1


def test_tune_tta_usage_errors(
    tmp_path: Path,
    trained_checkpoint: Path,
    synthetic_root: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    images = synthetic_root / "ISIC-2017_Validation_Data"
    masks = synthetic_root / "ISIC-2017_Validation_Part1_GroundTruth"
    model = ["--checkpoint", str(trained_checkpoint), "--images", str(images)]
    cases = [
        ([*model, "--tune-tta"], "add --tune-threshold"),
        ([*model, "--tune-threshold", "--tune-tta", "--tta"], "do not give --tta or --no-tta"),
        ([*model, "--tune-threshold", "--tune-tta", "--no-tta"], "do not give --tta or --no-tta"),
        (["--predictions", str(masks), "--tune-threshold"], "not --predictions"),
        (["--predictions", str(masks), "--no-tta"], "not --predictions"),
    ]
    for k, (argv, message) in enumerate(cases):
        out = tmp_path / f"case{k}"
        caplog.clear()
        assert run_cli(["evaluate", *argv, "--masks", str(masks), "--output", str(out)]) == 2
        assert message in caplog.text, (argv, caplog.text)
        assert not out.exists()


def test_the_guard_interval_is_the_paired_bootstrap_of_the_mean() -> None:
    gain = torch.tensor([0.01, 0.02, 0.03, 0.015] * 5)
    low, high = guard_interval(gain)
    assert 0.0 < low < float(gain.mean()) < high
    low, high = guard_interval(torch.tensor([0.05, -0.05] * 10))
    assert low < 0.0 < high
    assert guard_interval(torch.zeros(7)) == (0.0, 0.0)
    with pytest.raises(ValueError, match="at least one image"):
        guard_interval(torch.zeros(0))
