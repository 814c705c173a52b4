"""Per-image metrics against hand-computed values, and ``skinet evaluate`` in both modes."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import cv2
import numpy as np
import pytest
from tests.helpers.inference import run_cli, write_mask, write_rgb

from skinet.evaluation.mask_folders import evaluate_mask_folders, mask_id
from skinet.metrics.masks import MaskMetrics, compute_mask_metrics, summarize_metrics


def _cases() -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """ID -> (prediction, ground truth), 4x4 masks."""
    gt = np.zeros((4, 4), np.uint8)
    gt[0, :4] = 1  # 4 lesion pixels
    half = np.zeros((4, 4), np.uint8)
    half[0, :2] = half[1, :2] = 1  # 2 hits, 2 false positives, 2 misses
    most = gt.copy()
    most[1, 0] = 1  # 4 hits, 1 false positive: Jaccard 0.8
    empty = np.zeros((4, 4), np.uint8)
    return {
        "half": (half, gt),
        "exact": (gt.copy(), gt),
        "both_empty": (empty, empty),
        "missed": (empty, gt),
        "most": (most, gt),
    }


# (tp, fp, fn, tn), jaccard, dice, thresholded jaccard, sensitivity, specificity, accuracy
EXPECTED = {
    "half": ((2, 2, 2, 10), 2 / 6, 4 / 8, 0.0, 2 / 4, 10 / 12, 12 / 16),
    "exact": ((4, 0, 0, 12), 1.0, 1.0, 1.0, 1.0, 1.0, 1.0),
    "both_empty": ((0, 0, 0, 16), 1.0, 1.0, 1.0, 1.0, 1.0, 1.0),
    "missed": ((0, 0, 4, 12), 0.0, 0.0, 0.0, 0.0, 1.0, 12 / 16),
    "most": ((4, 1, 0, 11), 0.8, 8 / 9, 0.8, 1.0, 11 / 12, 15 / 16),
}


@pytest.mark.parametrize("name", list(EXPECTED))
def test_metrics_match_hand_computed(name: str) -> None:
    pred, gt = _cases()[name]
    metrics = compute_mask_metrics(pred * 255, gt)  # any non-zero value is lesion
    counts, jaccard, dice, thresholded, sens, spec, acc = EXPECTED[name]
    assert (metrics.tp, metrics.fp, metrics.fn, metrics.tn) == counts
    assert metrics.jaccard == pytest.approx(jaccard)
    assert metrics.dice == pytest.approx(dice)
    assert metrics.thresholded_jaccard == pytest.approx(thresholded)
    assert (metrics.sensitivity, metrics.specificity) == (pytest.approx(sens), pytest.approx(spec))
    assert metrics.accuracy == pytest.approx(acc)


def test_summary_means_and_cutoff() -> None:
    summary = summarize_metrics([MaskMetrics(*e[0]) for e in EXPECTED.values()])
    jaccards = [e[1] for e in EXPECTED.values()]
    assert summary["num_images"] == 5
    assert summary["mean_jaccard"] == pytest.approx(np.mean(jaccards))
    assert summary["mean_dice"] == pytest.approx(np.mean([e[2] for e in EXPECTED.values()]))
    assert summary["mean_thresholded_jaccard"] == pytest.approx((1 + 1 + 0.8) / 5)
    assert summary["fraction_below_cutoff"] == pytest.approx(2 / 5)
    assert summary["pooled_jaccard"] == pytest.approx(10 / (10 + 3 + 6))


def test_size_mismatch_is_an_error() -> None:
    with pytest.raises(ValueError, match="original resolution"):
        compute_mask_metrics(np.zeros((4, 5)), np.zeros((5, 4)))


@pytest.mark.parametrize(
    ("name", "expected"),
    [("ISIC_1_mask.png", "ISIC_1"), ("ISIC_1_segmentation.png", "ISIC_1"), ("a.png", "a")],
)
def test_mask_ids(name: str, expected: str) -> None:
    assert mask_id(Path(name)) == expected


def test_evaluate_folders_cli(tmp_path: Path) -> None:
    preds, gts, out = tmp_path / "pred", tmp_path / "gt", tmp_path / "report"
    preds.mkdir(), gts.mkdir()
    for name, (pred, gt) in _cases().items():
        write_mask(preds / f"{name}_mask.png", pred)
        write_mask(gts / f"{name}_segmentation.png", gt)
    (preds / "half_proba.png").write_bytes(b"ignored: not a mask")
    argv = ["evaluate", "--predictions", str(preds), "--masks", str(gts)]
    assert run_cli([*argv, "--output", str(out)]) == 0
    with (out / "per_image.csv").open() as handle:
        rows = {row["id"]: row for row in csv.DictReader(handle)}
    assert set(rows) == set(EXPECTED)
    assert float(rows["half"]["jaccard"]) == pytest.approx(1 / 3)
    assert float(rows["both_empty"]["dice"]) == 1.0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["mean_jaccard"] == pytest.approx(np.mean([e[1] for e in EXPECTED.values()]))
    assert summary["num_failed"] == 0
    assert (out / "jaccard_histogram.png").stat().st_size > 0


def _square(col_shift: int = 0) -> np.ndarray:
    mask = np.zeros((32, 32), np.uint8)
    mask[10:20, 10 + col_shift : 20 + col_shift] = 1
    return mask


def test_evaluate_reports_surface_distances_and_a_gallery(tmp_path: Path) -> None:
    """HD95/ASSD columns in px and mm (values of tests/metrics/test_surface.py), the
    empty-mask conventions, and the failure gallery of the worst images by Jaccard."""
    preds, gts, out = tmp_path / "pred", tmp_path / "gt", tmp_path / "report"
    preds.mkdir(), gts.mkdir()
    empty = np.zeros((32, 32), np.uint8)
    cases = {
        "shifted": (_square(3), _square()),  # Jaccard 70 / 130
        "exact": (_square(), _square()),
        "both_empty": (empty, empty),
        "missed": (empty, _square()),  # Jaccard 0, distances undefined
    }
    for name, (pred, gt) in cases.items():
        write_mask(preds / f"{name}_mask.png", pred)
        write_mask(gts / f"{name}_segmentation.png", gt)
    argv = ["evaluate", "--predictions", str(preds), "--masks", str(gts)]
    argv += ["--output", str(out), "--pixel-spacing-mm", "0.5", "--gallery", "2"]
    assert run_cli(argv) == 0

    with (out / "per_image.csv").open() as handle:
        rows = {row["id"]: row for row in csv.DictReader(handle)}
    columns = ("hd95_px", "assd_px", "hd95_mm", "assd_mm")
    assert [float(rows["shifted"][c]) for c in columns] == [3.0, 1.5, 1.5, 0.75]
    assert [float(rows["exact"][c]) for c in columns] == [0.0] * 4
    assert [float(rows["both_empty"][c]) for c in columns] == [0.0] * 4
    assert all(rows["missed"][c] == "nan" for c in columns)

    summary = json.loads((out / "summary.json").read_text())
    assert summary["pixel_spacing_mm"] == [0.5, 0.5]
    assert summary["num_surface_undefined"] == 1 and summary["surface_undefined"] == ["missed"]
    assert summary["mean_hd95_px"] == pytest.approx(1.0)  # (3 + 0 + 0) / 3, "missed" left out
    assert summary["mean_assd_mm"] == pytest.approx(0.25)

    gallery = out / "failure_gallery.png"
    assert gallery.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert cv2.imread(str(gallery)).shape[1] > 400  # two tiles side by side


def test_evaluate_without_spacing_has_pixel_columns_only(tmp_path: Path) -> None:
    preds, gts, out = tmp_path / "pred", tmp_path / "gt", tmp_path / "report"
    preds.mkdir(), gts.mkdir()
    write_mask(preds / "a.png", _square(3))
    write_mask(gts / "a.png", _square())
    argv = ["evaluate", "--predictions", str(preds), "--masks", str(gts)]
    assert run_cli([*argv, "--output", str(out), "--gallery", "0"]) == 0
    with (out / "per_image.csv").open() as handle:
        (row,) = csv.DictReader(handle)
    assert float(row["hd95_px"]) == 3.0 and "hd95_mm" not in row
    summary = json.loads((out / "summary.json").read_text())
    assert summary["pixel_spacing_mm"] is None and "mean_hd95_mm" not in summary
    assert not (out / "failure_gallery.png").exists()


@pytest.mark.parametrize(
    ("option", "message"),
    [
        (["--pixel-spacing-mm", "0"], "expected a number > 0"),
        (["--pixel-spacing-mm", "1", "2", "3"], "one value (isotropic) or two"),
        (["--gallery", "-1"], "expected an integer >= 0"),
    ],
)
def test_bad_evaluate_options_are_usage_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], option: list[str], message: str
) -> None:
    argv = ["evaluate", "--predictions", str(tmp_path), "--masks", str(tmp_path)]
    with pytest.raises(SystemExit) as exit_info:
        run_cli([*argv, "--output", str(tmp_path / "r"), *option])
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_missing_and_mismatched_predictions_fail(tmp_path: Path) -> None:
    preds, gts = tmp_path / "pred", tmp_path / "gt"
    preds.mkdir(), gts.mkdir()
    write_mask(gts / "a.png", np.ones((4, 4)))
    write_mask(gts / "b.png", np.ones((4, 4)))
    write_mask(preds / "a_mask.png", np.ones((4, 5)))
    result = evaluate_mask_folders(preds, gts)
    assert set(result.failures) == {"a", "b"} and "does not match" in result.failures["a"]
    assert result.exit_code == 1
    argv = ["evaluate", "--predictions", str(preds), "--masks", str(gts)]
    assert run_cli([*argv, "--output", str(tmp_path / "r")]) == 1
    assert run_cli(["evaluate", "--predictions", str(preds), "--output", str(tmp_path)]) == 2


def test_evaluate_checkpoint_on_a_split(
    trained_checkpoint: Path, synthetic_root: Path, tmp_path: Path
) -> None:
    out = tmp_path / "report"
    argv = ["evaluate", "--checkpoint", str(trained_checkpoint), "--data-dir", str(synthetic_root)]
    argv += ["--dataset", "isic2017", "--split", "test", "--output", str(out), "--tta"]
    assert run_cli([*argv, "--device", "cpu", "--keep-largest"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["num_images"] == 4 and summary["split"] == "test"
    assert 0.0 <= summary["mean_jaccard"] <= 1.0
    with (out / "per_image.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    assert {(int(r["height"]), int(r["width"])) for r in rows} == {(64, 64)}  # original size
    assert all(float(r["hd95_px"]) >= 0 or r["hd95_px"] == "nan" for r in rows)
    # The default gallery: the 8 worst images, here all 4 of the split.
    assert (out / "failure_gallery.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_evaluate_uses_the_runs_recorded_split_and_refuses_when_an_image_is_gone(
    tmp_path: Path, synthetic_root: Path, caplog: pytest.LogCaptureFixture
) -> None:
    import shutil

    from tests.helpers.config import tiny_raw_config

    from skinet.config.experiment import parse_config
    from skinet.training.run import run_training

    data = tmp_path / "data"
    shutil.copytree(synthetic_root, data)
    raw = tiny_raw_config(tmp_path, data)
    raw["TRAIN_CONFIG"].update(max_epochs=1, use_mlflow_logger=False)
    result = run_training(parse_config(raw), visualize=False)
    checkpoint = str(result.best_checkpoint)
    argv = ["evaluate", "--checkpoint", checkpoint, "--split", "test", "--gallery", "0"]
    assert run_cli([*argv, "--output", str(tmp_path / "before")]) == 0
    before = json.loads((tmp_path / "before" / "summary.json").read_text())
    assert before["num_images"] == 4
    # A training image gone: every recorded test image is still there, so the test split is.
    sorted((data / "ISIC-2017_Training_Data").glob("*.jpg"))[0].unlink()
    assert run_cli([*argv, "--output", str(tmp_path / "train_image_gone")]) == 0
    same = json.loads((tmp_path / "train_image_gone" / "summary.json").read_text())
    assert same["num_images"] == 4 and same["mean_jaccard"] == before["mean_jaccard"]
    (gone,) = sorted((data / "ISIC-2017_Test_v2_Data").glob("*.jpg"))[:1]
    gone.unlink()
    caplog.clear()
    assert run_cli([*argv, "--output", str(tmp_path / "after")]) == 1
    assert "no longer holds 1 image(s) of the split the training run recorded" in caplog.text
    assert "as 'test'" in caplog.text
    assert gone.stem in caplog.text and not (tmp_path / "after").exists()


def _external_folder(root: Path, with_mask: int, without_mask: int = 0) -> str:
    """``NAME=IMAGES:MASKS`` for a labelled folder, some of its images without a mask."""
    from tests.helpers.inference import write_rgb

    images, masks = root / "images", root / "masks"
    images.mkdir(parents=True), masks.mkdir()
    for i in range(with_mask + without_mask):
        write_rgb(images / f"img{i}.png", 32, 40, seed=i)
        if i < with_mask:
            write_mask(masks / f"img{i}_mask.png", np.eye(32, 40))
    return f"{root.name}={images}:{masks}"


def _evaluate_external(checkpoint: Path, external: str, out: Path) -> tuple[int, dict]:
    """``skinet evaluate`` on one ``--external`` set alone: the exit status and its summary."""
    argv = ["evaluate", "--checkpoint", str(checkpoint), "--split", "none"]
    argv += ["--external", external, "--device", "cpu", "--gallery", "0"]
    code = run_cli([*argv, "--output", str(out)])
    name = external.split("=")[0]
    return code, json.loads((out / name / "summary.json").read_text())


def test_external_images_without_a_mask_count_in_the_summary_and_the_exit_status(
    trained_checkpoint: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    external = _external_folder(tmp_path / "clinic", with_mask=4, without_mask=4)
    code, summary = _evaluate_external(trained_checkpoint, external, tmp_path / "report")
    assert code == 1
    assert summary["num_images"] == 4 and summary["num_failed"] == 0
    assert summary["num_without_mask"] == 4
    assert sorted(summary["without_mask"]) == ["img4", "img5", "img6", "img7"]
    assert "4 of 8 image(s) have no mask" in caplog.text


def test_a_bad_mask_is_named_in_the_failures(trained_checkpoint: Path, tmp_path: Path) -> None:
    external = _external_folder(tmp_path / "clinic", with_mask=4)
    masks = tmp_path / "clinic" / "masks"
    write_mask(masks / "img1_mask.png", np.eye(30, 40))  # another size
    labels = masks / "img2_mask.png"  # label indices, not a binary mask
    assert cv2.imwrite(str(labels), (np.eye(32, 40) * 3).astype(np.uint8))
    code, summary = _evaluate_external(trained_checkpoint, external, tmp_path / "report")
    assert code == 1
    assert summary["num_images"] == 2 and summary["num_failed"] == 2
    failures = summary["failures"]
    assert failures["img1"] == "mask size 40x30 does not match image size 40x32 (img1.png)"
    assert failures["img2"].startswith(f"its mask {labels}: mask values [0, 3] are not binary")


def test_evaluate_into_a_folder_used_before_clears_only_its_own_reports(
    trained_checkpoint: Path, tmp_path: Path
) -> None:
    images, masks = _external_folder(tmp_path / "main", with_mask=3).split("=")[1].split(":")
    old_set = _external_folder(tmp_path / "old", with_mask=2)
    new_set = _external_folder(tmp_path / "new", with_mask=2)
    out = tmp_path / "report"
    model = ["evaluate", "--checkpoint", str(trained_checkpoint), "--device", "cpu"]
    first = [*model, "--images", images, "--masks", masks, "--external", old_set]
    assert run_cli([*first, "--gallery", "2", "--output", str(out)]) == 0
    assert (out / "failure_gallery.png").is_file() and (out / "old" / "summary.json").is_file()
    (out / "notes.txt").write_text("mine")
    (out / "mine").mkdir()
    (out / "mine" / "summary.json").write_text("{}")  # not a SkiNet report: kept

    second = [*model, "--split", "none", "--external", new_set, "--gallery", "0"]
    assert run_cli([*second, "--output", str(out)]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["mine", "new", "notes.txt"]
    assert (out / "mine" / "summary.json").read_text() == "{}"
    assert sorted(p.name for p in (out / "new").iterdir()) == [
        "jaccard_histogram.png",
        "per_image.csv",
        "summary.json",
    ]


def test_an_external_set_named_like_a_report_file_is_a_usage_error(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    external = _external_folder(tmp_path / "summary.json", with_mask=1)
    argv = ["evaluate", "--checkpoint", "x.ckpt", "--split", "test", "--external", external]
    assert run_cli([*argv, "--output", str(tmp_path / "out")]) == 2
    assert "--external summary.json=...: the set's reports go into the folder" in caplog.text
    assert not (tmp_path / "out").exists()


@pytest.mark.heavy
def test_ctrl_c_while_evaluating_prints_one_line_and_leaves_no_report(
    trained_checkpoint: Path, tmp_path: Path
) -> None:
    import os
    import signal
    import subprocess
    import sys
    import time

    from tests.helpers.inference import write_rgb

    small = _external_folder(tmp_path / "small", with_mask=2)
    big = tmp_path / "big"
    (big / "images").mkdir(parents=True), (big / "masks").mkdir()
    for i in range(400):  # long enough to be interrupted midway
        write_rgb(big / "images" / f"b{i}.png", 192, 192, seed=i)
        write_mask(big / "masks" / f"b{i}_mask.png", np.eye(192))
    out = tmp_path / "report"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    repo = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(repo / "src"), str(repo)])}
    argv = ["evaluate", "--checkpoint", str(trained_checkpoint), "--device", "cpu"]
    argv += ["--split", "none", "--external", small, "--external", f"big={big}/images:{big}/masks"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "skinet.cli.main", *argv, "--output", str(out)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    deadline = time.monotonic() + 120
    while not (out / "small" / "summary.json").exists():  # the first set is written
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[0][-3000:]
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    output = proc.communicate(timeout=120)[0]
    assert proc.returncode == 130, output[-3000:]
    assert "Traceback" not in output and "KeyboardInterrupt" not in output, output[-3000:]
    assert "skinet evaluate interrupted (Ctrl-C): no report is left in" in " ".join(output.split())
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt"]  # the first set's too


@pytest.mark.parametrize("dataset", ["isic2017", "synthetic"])
def test_a_checkpoints_relative_data_dir_missing_here_asks_for_data_dir(
    trained_checkpoint: Path,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
    dataset: str,
) -> None:
    """Run from another folder, the checkpoint's relative data_dir is not there: say so, and
    that --data-dir gives the dataset (not that a synthetic set should be generated)."""
    import torch
    from tests.helpers.inference import rewrite_checkpoint

    config = torch.load(trained_checkpoint, map_location="cpu", weights_only=True)["skinet"]
    config = config["config"]
    config["DATA_CONFIG"].update(data_dir="data/skin", dataset=dataset)
    checkpoint = rewrite_checkpoint(trained_checkpoint, tmp_path / "rel.ckpt", config=config)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    argv = ["evaluate", "--checkpoint", str(checkpoint), "--split", "test", "--device", "cpu"]
    assert run_cli([*argv, "--output", str(tmp_path / "report")]) == 1
    assert (
        "the checkpoint's DATA_CONFIG.data_dir data/skin (relative to the current folder) does "
        f"not exist (looked in {elsewhere / 'data' / 'skin'}): give --data-dir"
    ) in caplog.text
    assert "not generated yet" not in caplog.text
    assert not (tmp_path / "report").exists() and not (elsewhere / "data").exists()


def test_summary_json_records_the_threshold_without_float32_noise(
    trained_checkpoint: Path, tmp_path: Path
) -> None:
    import torch
    from tests.helpers.inference import rewrite_checkpoint

    noisy = float(torch.tensor(0.44, dtype=torch.float32))
    assert noisy != 0.44
    checkpoint = rewrite_checkpoint(
        trained_checkpoint, tmp_path / "n.ckpt", val_optimal_threshold=noisy
    )
    images, masks = _external_folder(tmp_path / "set", with_mask=2).split("=")[1].split(":")
    argv = ["evaluate", "--checkpoint", str(checkpoint), "--images", images, "--masks", masks]
    out = tmp_path / "report"
    assert run_cli([*argv, "--device", "cpu", "--gallery", "0", "--output", str(out)]) == 0
    text = (out / "summary.json").read_text()
    assert json.loads(text)["threshold"] == 0.44 and "0.43999" not in text


def test_a_folder_of_images_the_model_trained_on_is_flagged(
    trained_checkpoint: Path, synthetic_root: Path, tmp_path: Path, caplog
) -> None:
    train = synthetic_root / "ISIC-2017_Training_Data"
    masks = synthetic_root / "ISIC-2017_Training_Part1_GroundTruth"
    test = synthetic_root / "ISIC-2017_Test_v2_Data"
    test_masks = synthetic_root / "ISIC-2017_Test_v2_Part1_GroundTruth"
    argv = ["evaluate", "--checkpoint", str(trained_checkpoint), "--device", "cpu"]
    argv += ["--gallery", "0", "--images", str(train), "--masks", str(masks)]
    assert (
        run_cli([*argv, "--external", f"held_out={test}:{test_masks}", "-o", str(tmp_path / "r")])
        == 0
    )
    summary = json.loads((tmp_path / "r" / "summary.json").read_text())
    trained_on = sorted(p.stem for p in train.glob("*.jpg"))
    assert summary["seen_in_training"] == trained_on  # every training image
    assert f"{len(trained_on)} of its {len(trained_on)} image(s)" in caplog.text
    held_out = json.loads((tmp_path / "r" / "held_out" / "summary.json").read_text())
    assert "seen_in_training" not in held_out  # the test split: never trained on


def test_probability_hooks_get_each_way_in_the_same_pass_and_leave_the_scores_alone(
    trained_checkpoint: Path, tmp_path: Path
) -> None:
    """A hook per way of predicting (flips off or on) gets that way's maps; the scores stay
    the predictor's own way's, and a plain callable still gets those."""
    from skinet.datasets.layouts import Sample
    from skinet.evaluation.evaluate import evaluate_predictor
    from skinet.inference.predictor import Predictor

    samples = []
    for i in range(5):  # more than one batch of 2
        image = write_rgb(tmp_path / f"im{i}.png", 40 + 3 * i, 52, seed=i)
        write_mask(tmp_path / f"im{i}_mask.png", image[..., 0] > 150)
        samples.append(Sample(f"im{i}", tmp_path / f"im{i}.png", tmp_path / f"im{i}_mask.png"))
    predictor = Predictor.from_checkpoint(trained_checkpoint, device="cpu", tta=False)
    predictor.batch_size = 2
    plain = evaluate_predictor(predictor, samples, progress=False)
    seen: dict[bool, list[np.ndarray]] = {False: [], True: []}
    hooks = {way: (lambda probs, _mask, way=way: seen[way].append(probs)) for way in seen}
    both = evaluate_predictor(predictor, samples, progress=False, on_probabilities=hooks)
    assert both.metrics == plain.metrics and predictor.tta is False
    own: list[np.ndarray] = []
    evaluate_predictor(
        predictor, samples, progress=False, on_probabilities=lambda p, _: own.append(p)
    )
    flipped = Predictor.from_checkpoint(trained_checkpoint, device="cpu", tta=True)
    images = [cv2.cvtColor(cv2.imread(str(s.image_path)), cv2.COLOR_BGR2RGB) for s in samples]
    expected = {
        False: predictor.predict_proba_batch(images),
        True: flipped.predict_proba_batch(images),
    }
    assert not np.allclose(expected[False][0], expected[True][0])  # the ways differ here
    for way in (False, True):
        for got, want in zip(seen[way], expected[way], strict=True):
            np.testing.assert_allclose(got, want, atol=1e-6)
    for got, want in zip(own, expected[False], strict=True):
        np.testing.assert_allclose(got, want, atol=1e-6)
