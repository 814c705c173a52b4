"""Adapting to one's own clinic: external sets, the area ratio, and a calibrated threshold."""

from __future__ import annotations

import json
import math
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from tests.helpers.inference import run_cli

from skinet.checkpoints.calibrated_card import CALIBRATION_HEADING
from skinet.checkpoints.format import FORMAT_VERSION
from skinet.checkpoints.read import load_checkpoint
from skinet.evaluation.gallery import FailureGallery, area_ratio_badness
from skinet.inference.predictor import Predictor
from skinet.metrics.masks import MaskMetrics, compute_mask_metrics, summarize_metrics
from skinet.runtime.files import file_sha256


def _disc(size: int, radius: int) -> np.ndarray:
    rows, cols = np.ogrid[:size, :size]
    return ((rows - size // 2) ** 2 + (cols - size // 2) ** 2 <= radius**2).astype(np.uint8)


def test_area_ratio_on_hand_made_masks() -> None:
    truth = np.zeros((10, 10), np.uint8)
    truth[2:6, 2:6] = 1  # 16 pixels
    dilated = np.zeros_like(truth)
    dilated[1:7, 1:7] = 1  # 36 pixels, all the truth inside
    shrunk = np.zeros_like(truth)
    shrunk[3:5, 3:5] = 1  # 4 pixels
    assert compute_mask_metrics(dilated, truth).area_ratio == pytest.approx(36 / 16)
    assert compute_mask_metrics(shrunk, truth).area_ratio == pytest.approx(4 / 16)
    assert compute_mask_metrics(truth, truth).area_ratio == 1.0
    assert math.isnan(compute_mask_metrics(dilated, np.zeros_like(truth)).area_ratio)
    # The median skips images without lesion pixels; the dilated contour shows as > 1.
    metrics = [compute_mask_metrics(p, t) for p, t in ((dilated, truth), (truth, truth))]
    metrics.append(compute_mask_metrics(dilated, np.zeros_like(truth)))
    summary = summarize_metrics(metrics)
    assert summary["median_area_ratio"] == pytest.approx((36 / 16 + 1.0) / 2)
    assert compute_mask_metrics(dilated, truth).as_row()["area_ratio"] == pytest.approx(2.25)


def test_the_gallery_sorts_by_area_ratio_both_ways() -> None:
    truth = _disc(40, 10)
    cases = {
        "dilated": _disc(40, 15),  # area x2.2: far from 1
        "shrunk": _disc(40, 5),  # area x0.25: farthest
        "exact": truth,
        "slightly": _disc(40, 11),  # area x1.2
    }
    by_jaccard, by_area = FailureGallery(2), FailureGallery(2, "area_ratio")
    for name, pred in cases.items():
        metrics = compute_mask_metrics(pred, truth)
        for gallery in (by_jaccard, by_area):
            gallery.offer(name, metrics, None, pred, truth)
    assert [e.image_id for e in by_area.entries] == ["shrunk", "dilated"]
    assert area_ratio_badness(MaskMetrics(0, 3, 0, 10)) == math.inf  # lesion on a clean image
    assert area_ratio_badness(MaskMetrics(0, 0, 0, 10)) == 0.0
    with pytest.raises(ValueError, match="gallery order"):
        FailureGallery(2, "dice")


@pytest.fixture
def labelled_folder(tmp_path: Path, synthetic_root: Path) -> tuple[Path, Path]:
    """The synthetic validation split as a clinic's folder: images/ and masks/ (X_mask.png)."""
    images, masks = tmp_path / "clinic" / "images", tmp_path / "clinic" / "masks"
    images.mkdir(parents=True)
    masks.mkdir(parents=True)
    for path in sorted((synthetic_root / "ISIC-2017_Validation_Data").glob("*.jpg")):
        shutil.copy(path, images / path.name)
        truth = synthetic_root / "ISIC-2017_Validation_Part1_GroundTruth"
        mask = truth / f"{path.stem}_segmentation.png"
        shutil.copy(mask, masks / f"{path.stem}_mask.png")
    return images, masks


def test_external_scores_equal_evaluate_of_the_same_folder(
    tmp_path: Path,
    trained_checkpoint: Path,
    labelled_folder: tuple[Path, Path],
    capsys: pytest.CaptureFixture[str],
) -> None:
    images, masks = labelled_folder
    ckpt = str(trained_checkpoint)
    alone = tmp_path / "alone"
    assert (
        run_cli(
            ["evaluate", "--checkpoint", ckpt, "--images", str(images)]
            + ["--masks", str(masks), "--output", str(alone)]
        )
        == 0
    )
    both = tmp_path / "both"
    external = f"clinic={images}:{masks}"
    assert (
        run_cli(
            ["evaluate", "--checkpoint", ckpt, "--split", "val"]
            + ["--external", external, "--output", str(both)]
        )
        == 0
    )
    printed = capsys.readouterr().out
    assert "clinic" in printed and "mean over sets" in printed and "area ratio" in printed
    mine = json.loads((both / "clinic" / "summary.json").read_text())
    reference = json.loads((alone / "summary.json").read_text())
    for key in ("num_images", "mean_jaccard", "mean_dice", "median_area_ratio"):
        assert mine[key] == reference[key], key
    assert (both / "clinic" / "per_image.csv").read_text() == (alone / "per_image.csv").read_text()
    # The validation split of the checkpoint is the same images: the same scores.
    split = json.loads((both / "summary.json").read_text())
    assert split["mean_jaccard"] == pytest.approx(reference["mean_jaccard"])
    # An external set without --checkpoint, or a missing folder, is a usage error.
    with pytest.raises(SystemExit) as bad:
        run_cli(
            ["evaluate", "--checkpoint", ckpt, "--output", str(tmp_path / "x")]
            + ["--external", f"clinic={tmp_path / 'nope'}:{masks}"]
        )
    assert bad.value.code == 2
    assert "image folder not found" in capsys.readouterr().err


@pytest.fixture
def dilated_folder(labelled_folder: tuple[Path, Path]) -> tuple[Path, Path]:
    """The clinic folder with every lesion drawn 6 pixels wider: a clinic whose best threshold
    is not the one the source model chose on its own validation images."""
    import cv2

    images, masks = labelled_folder
    kernel = cv2.getStructuringElement(cv2.MORPH_ELLIPSE, (13, 13))
    for path in masks.glob("*.png"):
        cv2.imwrite(str(path), cv2.dilate(cv2.imread(str(path), cv2.IMREAD_GRAYSCALE), kernel))
    return images, masks


def test_a_calibrated_threshold_is_used_by_predict_evaluate_and_export(
    tmp_path: Path,
    trained_checkpoint: Path,
    dilated_folder: tuple[Path, Path],
    caplog: pytest.LogCaptureFixture,
) -> None:
    images, masks = dilated_folder
    calibrated = tmp_path / "clinic.ckpt"
    tuned_dir = tmp_path / "tuned"
    code = run_cli(
        ["evaluate", "--checkpoint", str(trained_checkpoint), "--images", str(images)]
        + ["--masks", str(masks), "--tune-threshold", "--save-calibrated", str(calibrated)]
        + ["--output", str(tuned_dir)]
    )
    assert code == 0
    tuned = json.loads((tuned_dir / "summary.json").read_text())["threshold"]
    source = load_checkpoint(trained_checkpoint)
    copy = load_checkpoint(calibrated)
    assert copy.payload.format_version == FORMAT_VERSION
    assert tuned != source.threshold  # else ignoring the calibration would pass unseen
    # summary.json rounds to 6 decimals; the checkpoint keeps the sweep's float32 value
    assert copy.threshold == pytest.approx(tuned, abs=1e-6) and copy.payload.calibration
    exact = copy.threshold
    assert copy.payload.calibration["num_images"] == 4
    assert copy.payload.calibration["source_threshold"] == source.threshold
    for name, weight in source.state_dict.items():
        assert torch.equal(weight, copy.state_dict[name])
    # The original is never overwritten, and a threshold of its own stays out of the way.
    refused = run_cli(
        ["evaluate", "--checkpoint", str(calibrated), "--images", str(images)]
        + ["--masks", str(masks), "--tune-threshold", "--save-calibrated"]
        + [str(calibrated), "--output", str(tmp_path / "again")]
    )
    assert refused == 2 and load_checkpoint(calibrated).threshold == exact

    assert Predictor.from_checkpoint(calibrated).threshold == exact
    caplog.clear()
    evaluated = tmp_path / "evaluated"
    run_cli(
        ["evaluate", "--checkpoint", str(calibrated), "--images", str(images)]
        + ["--masks", str(masks), "--output", str(evaluated)]
    )
    summary = json.loads((evaluated / "summary.json").read_text())
    assert summary["threshold"] == tuned
    # The report names the file it scored by content, and where its threshold came from.
    assert summary["checkpoints"] == [
        {"path": str(calibrated.resolve()), "sha256": file_sha256(calibrated)}
    ]
    assert summary["threshold_choice"]["source"] == "calibrated"
    assert summary["threshold_choice"]["calibration"]["num_images"] == 4
    assert f"threshold {tuned:.3f} (calibrated on {images.resolve()}, 4 images)" in caplog.text
    predicted = tmp_path / "predicted"
    assert (
        run_cli(
            ["predict", "--checkpoint", str(calibrated), "--images", str(images)]
            + ["--output", str(predicted), "--save-proba", "npy"]
        )
        == 0
    )
    import cv2

    differs = 0
    for proba in predicted.glob("*_proba.npy"):
        mask = np.load(proba) >= tuned
        written = predicted / proba.name.replace("_proba.npy", "_mask.png")
        assert np.array_equal(cv2.imread(str(written), cv2.IMREAD_GRAYSCALE) > 0, mask)
        differs += int(not np.array_equal(mask, np.load(proba) >= source.threshold))
    assert differs, "the calibrated and the source threshold give the same masks"
    exported = tmp_path / "model.pt"
    assert (
        run_cli(
            ["export", "--checkpoint", str(calibrated), "--format", "torchscript"]
            + ["--output", str(exported)]
        )
        == 0
    )
    sidecar = json.loads(exported.with_name("model.pt.json").read_text())
    assert sidecar["threshold"] == exact
    card = exported.with_name("model.pt.MODEL_CARD.md").read_text()
    assert CALIBRATION_HEADING in card and str(images.resolve()) in card
    assert f"**{tuned:.4f}**" in card
    beside = calibrated.with_name("clinic.ckpt.MODEL_CARD.md").read_text()
    assert beside.count(CALIBRATION_HEADING) == 1 and "# Model card" in beside


def test_save_calibrated_keeps_what_it_would_replace_and_names_what_it_cannot_write(
    tmp_path: Path,
    trained_checkpoint: Path,
    labelled_folder: tuple[Path, Path],
    caplog: pytest.LogCaptureFixture,
) -> None:
    import resource

    images, masks = labelled_folder
    out = tmp_path / "clinic.ckpt"
    out.write_bytes(b"mine")
    card = out.with_name("clinic.ckpt.MODEL_CARD.md")
    card.write_text("# my notes\n")
    argv = ["evaluate", "--checkpoint", str(trained_checkpoint), "--images", str(images)]
    argv += ["--masks", str(masks), "--tune-threshold", "--output", str(tmp_path / "tuned")]
    assert run_cli([*argv, "--save-calibrated", str(out)]) == 2
    assert out.read_bytes() == b"mine" and card.read_text() == "# my notes\n"
    assert run_cli([*argv, "--save-calibrated", str(out), "--overwrite"]) == 0
    assert load_checkpoint(out).payload.calibration is not None

    small = tmp_path / "small.ckpt"
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (20_000, hard))  # a checkpoint is larger
    try:
        code = run_cli([*argv, "--save-calibrated", str(small)])
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
    assert code != 0
    assert f"could not write {small} (File too large); nothing was written" in caplog.text
    assert not small.exists() and not list(tmp_path.glob(".small.ckpt*"))
    assert "Traceback" not in caplog.text

    # The card cannot take its name (a folder is in the way): no checkpoint without its card.
    blocked = tmp_path / "blocked.ckpt"
    blocked.with_name("blocked.ckpt.MODEL_CARD.md").mkdir()
    code = run_cli([*argv, "--save-calibrated", str(blocked), "--overwrite"])
    assert code != 0 and not blocked.exists() and not list(tmp_path.glob(".blocked*"))
    assert f"could not write {blocked}.MODEL_CARD.md (Is a directory)" in caplog.text


def test_summaries_record_a_split_only_where_one_was_scored(
    tmp_path: Path, trained_checkpoint: Path, labelled_folder: tuple[Path, Path]
) -> None:
    images, masks = labelled_folder
    ckpt = ["evaluate", "--checkpoint", str(trained_checkpoint)]
    folder = ["--images", str(images), "--masks", str(masks)]
    assert run_cli([*ckpt, *folder, "--output", str(tmp_path / "a")]) == 0
    assert json.loads((tmp_path / "a" / "summary.json").read_text())["split"] is None
    both = ["--split", "val", "--external", f"clinic={images}:{masks}"]
    assert run_cli([*ckpt, *both, "--output", str(tmp_path / "b")]) == 0
    assert json.loads((tmp_path / "b" / "summary.json").read_text())["split"] == "val"
    assert json.loads((tmp_path / "b" / "clinic" / "summary.json").read_text())["split"] is None
    # A split given with --images would be ignored: refused instead.
    assert run_cli([*ckpt, *folder, "--split", "val", "--output", str(tmp_path / "c")]) == 2
    assert not (tmp_path / "c").exists()


def test_tuning_on_an_external_set_marks_its_optimistic_score(
    tmp_path: Path,
    trained_checkpoint: Path,
    labelled_folder: tuple[Path, Path],
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    images, masks = labelled_folder
    argv = ["evaluate", "--checkpoint", str(trained_checkpoint), "--split", "none"]
    argv += ["--external", f"a={images}:{masks}", "--external", f"b={images}:{masks}"]
    assert run_cli([*argv, "--tune-threshold", "--output", str(tmp_path / "out")]) == 0
    printed = re.sub(r"\s+", " ", capsys.readouterr().out)
    assert "a (tuned)" in printed and "others" in printed  # the mean leaves the tuned set out
    assert "its scores are optimistic" in printed
    assert "the scores of a are optimistic (the threshold was tuned on them)" in caplog.text
