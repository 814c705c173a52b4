"""DATA_CONFIG preprocessing at inference: Predictor, old checkpoints, and the exported ONNX
model run from its sidecar alone (numpy/OpenCV/onnxruntime, no SkiNet)."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import cv2
import numpy as np
import pytest
import torch
from tests.helpers.config import requires_modules, tiny_raw_config
from tests.helpers.inference import rewrite_checkpoint

from skinet.config.experiment import parse_config
from skinet.imaging.preprocess import Preprocessing, resize_image
from skinet.inference.export import export_checkpoint, sidecar_path
from skinet.inference.predictor import Predictor

REPO = Path(__file__).resolve().parents[2]
CONSUMER = REPO / "docs" / "examples" / "onnx_predict.py"
NEEDS_ONNX = requires_modules("onnx", "onnxscript", "onnxruntime")


@pytest.fixture(scope="module")
def corrected_checkpoint(tmp_path_factory: pytest.TempPathFactory, synthetic_root: Path) -> Path:
    """The tiny config trained for an epoch with the dark-border crop, shades-of-gray and
    letterbox."""
    from skinet.training.run import run_training

    tmp = tmp_path_factory.mktemp("corrected")
    raw = tiny_raw_config(tmp, synthetic_root)
    raw["TRAIN_CONFIG"].update(max_epochs=1, use_mlflow_logger=False)
    raw["DATA_CONFIG"].update(
        resize_mode="letterbox",
        color_constancy="shades_of_gray",
        pad_value=10,
        crop_dark_border=True,
    )
    result = run_training(parse_config(raw), visualize=False)
    assert result.best_checkpoint is not None
    return result.best_checkpoint


def _cast_image(height: int, width: int) -> np.ndarray:
    """A warm-cast, non-square dermoscopy-like image: skin, a dark oval lesion, noise."""
    rng = np.random.default_rng(7)
    image = np.empty((height, width, 3), np.float64)
    image[:] = (205, 160, 140)
    lesion = np.zeros((height, width), np.uint8)
    cv2.ellipse(lesion, (width // 2, height // 2), (width // 5, height // 4), 20, 0, 360, 1, -1)
    image[lesion > 0] = (110, 70, 60)
    image += rng.normal(0, 8, image.shape)
    return np.clip(image * (1.2, 1.0, 0.8), 0, 255).astype(np.uint8)


def test_letterbox_prediction_comes_back_at_the_original_size(
    corrected_checkpoint: Path,
) -> None:
    predictor = Predictor.from_checkpoint(corrected_checkpoint, device="cpu")
    assert predictor.preprocessing == Preprocessing(
        32, "letterbox", "shades_of_gray", 10, crop_dark_border=True
    )
    image = _cast_image(45, 70)
    chw, placement = predictor.prepare(image)
    assert chw.shape == (3, 32, 32)
    assert placement.content == (21, 32) and placement.offset == (5, 0)
    probs = predictor.predict_proba(image)
    assert probs.shape == (45, 70) and probs.dtype == np.float32
    masks = predictor.predict_batch([image, _cast_image(80, 30)])
    assert [m.shape for m in masks] == [(45, 70), (80, 30)]


def test_old_checkpoint_without_the_fields_behaves_as_before(
    trained_checkpoint: Path, tmp_path: Path
) -> None:
    saved = torch.load(trained_checkpoint, map_location="cpu", weights_only=True)
    config = saved["skinet"]["config"]
    for key in ("resize_mode", "color_constancy", "pad_value", "crop_dark_border"):
        config["DATA_CONFIG"].pop(key, None)
    old = rewrite_checkpoint(trained_checkpoint, tmp_path / "old.ckpt", config=config)
    predictor = Predictor.from_checkpoint(old, device="cpu")
    assert predictor.preprocessing == Preprocessing(32, "squash", "none", 0)
    # Today's pipeline by hand: squash, normalise, forward, bilinear resize back.
    image = _cast_image(45, 70)
    batch = torch.from_numpy(predictor.normalizer(resize_image(image, 32))[None])
    with torch.inference_mode():
        expected = torch.sigmoid(predictor.model(batch))[0, 0].numpy()
    expected = cv2.resize(expected, (70, 45), interpolation=cv2.INTER_LINEAR)
    np.testing.assert_allclose(predictor.predict_proba(image), expected, atol=1e-6)


def _run_consumer(model: Path, image: Path, folder: Path, proba: str) -> np.ndarray:
    """``docs/examples/onnx_predict.py`` on ``image``: its probability map (its mask is written
    to ``folder/mask.png``). It runs in a fresh interpreter without this checkout on its path,
    which checks at the end that SkiNet was never imported."""
    runner = (
        "import runpy, sys; sys.argv = sys.argv[1:]; "
        "runpy.run_path(sys.argv[0], run_name='__main__'); "
        "assert not any(m == 'skinet' or m.startswith('skinet.') for m in sys.modules), "
        "'the consumer imported skinet'"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    argv = [str(CONSUMER), str(model), str(image), str(folder / "mask.png")]
    completed = subprocess.run(
        [sys.executable, "-c", runner, *argv, "--proba", str(folder / proba)],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert completed.returncode == 0, completed.stderr
    return np.load(folder / proba)


@pytest.mark.process
@NEEDS_ONNX
def test_onnx_from_the_sidecar_alone_predicts_like_the_predictor(
    corrected_checkpoint: Path, tmp_path: Path
) -> None:
    model_path = tmp_path / "model.onnx"
    export_checkpoint(corrected_checkpoint, model_path, "onnx")
    sidecar = json.loads(sidecar_path(model_path).read_text())
    steps = sidecar["preprocessing"]
    assert steps["resize_mode"] == "letterbox" and steps["pad"]["value"] == 10
    assert steps["color_constancy"] == {
        "method": "shades_of_gray",
        "power": 6,
        "rule": steps["color_constancy"]["rule"],
    }

    assert steps["crop_dark_border"]["enabled"]
    # In an uncropped black frame: the crop, letterbox and colour constancy all take part.
    image = cv2.copyMakeBorder(_cast_image(45, 70), 9, 7, 12, 5, cv2.BORDER_CONSTANT, value=0)
    image_path = tmp_path / "cast.png"
    assert cv2.imwrite(str(image_path), cv2.cvtColor(image, cv2.COLOR_RGB2BGR))
    onnx_probs = _run_consumer(model_path, image_path, tmp_path, "proba.npy")
    onnx_mask = cv2.imread(str(tmp_path / "mask.png"), cv2.IMREAD_GRAYSCALE) > 0

    predictor = Predictor.from_checkpoint(corrected_checkpoint, device="cpu")
    probs = predictor.predict_proba(image)
    assert onnx_probs.shape == probs.shape == (61, 87)
    assert probs.max() - probs.min() > 0.02  # a map with structure, not a constant
    assert not probs[:9].any() and not probs[:, :12].any()  # 0 in the cropped-off frame
    np.testing.assert_allclose(onnx_probs, probs, atol=1e-4)
    assert sidecar["threshold"] == pytest.approx(predictor.threshold)
    assert np.array_equal(onnx_mask, predictor.binarize(probs) > 0)
    # The preprocessing matters: the same model fed a plain squash predicts differently.
    squashed = Predictor.from_checkpoint(corrected_checkpoint, device="cpu")
    squashed.preprocessing = Preprocessing(32)
    assert np.abs(squashed.predict_proba(image) - probs).max() > 1e-3

    # A sidecar that says "tta" (a calibration chose flips): the consumer averages the flips.
    sidecar_path(model_path).write_text(json.dumps({**sidecar, "tta": True}))
    flipped = _run_consumer(model_path, image_path, tmp_path, "flipped.npy")
    with_flips = Predictor.from_checkpoint(corrected_checkpoint, device="cpu", tta=True)
    expected = with_flips.predict_proba(image)
    assert np.abs(expected - probs).max() > 1e-4  # flips change this model's map
    np.testing.assert_allclose(flipped, expected, atol=1e-4)

    # A mask it cannot write (no such folder) is an error, not a silent success.
    argv = [str(CONSUMER), str(model_path), str(image_path), str(tmp_path / "absent" / "m.png")]
    failed = subprocess.run([sys.executable, *argv], capture_output=True, text=True, timeout=120)
    assert failed.returncode != 0 and "cannot write" in failed.stderr


def test_predict_and_evaluate_cli_use_the_checkpoints_preprocessing(
    corrected_checkpoint: Path, tmp_path: Path
) -> None:
    from tests.helpers.inference import run_cli

    from skinet.metrics.masks import compute_mask_metrics

    data = tmp_path / "clinic"  # the generic folder layout: images/ and masks/
    (data / "images").mkdir(parents=True)
    (data / "masks").mkdir()
    images = {"wide": _cast_image(45, 70), "tall": _cast_image(72, 40)}
    targets = {}
    for name, image in images.items():
        image_path = data / "images" / f"{name}.png"
        assert cv2.imwrite(str(image_path), cv2.cvtColor(image, cv2.COLOR_RGB2BGR))
        targets[name] = (image[..., 2] < 70).astype(np.uint8)  # the dark lesion
        assert cv2.imwrite(str(data / "masks" / f"{name}_segmentation.png"), targets[name] * 255)
    predictor = Predictor.from_checkpoint(corrected_checkpoint, device="cpu")

    out = tmp_path / "masks"
    argv = ["predict", "--checkpoint", str(corrected_checkpoint), "--device", "cpu"]
    assert (
        run_cli([*argv, "--images", str(data / "images" / "wide.png"), "--output", str(out)]) == 0
    )
    written = cv2.imread(str(out / "wide_mask.png"), cv2.IMREAD_GRAYSCALE) > 0
    assert np.array_equal(written, predictor.predict(images["wide"]) > 0)

    report = tmp_path / "report"
    argv = ["evaluate", "--checkpoint", str(corrected_checkpoint), "--data-dir", str(data)]
    argv += ["--dataset", "folder", "--split", "all", "--output", str(report), "--device", "cpu"]
    assert run_cli(argv) == 0
    rows = {r["id"]: r for r in csv.DictReader((report / "per_image.csv").open())}
    for name, image in images.items():
        assert (int(rows[name]["height"]), int(rows[name]["width"])) == image.shape[:2]
        expected = compute_mask_metrics(predictor.predict(image), targets[name]).jaccard
        assert float(rows[name]["jaccard"]) == pytest.approx(expected, abs=1e-6)


def test_skinet_predict_crops_a_framed_image_and_writes_its_mask_at_full_size(
    corrected_checkpoint: Path, tmp_path: Path
) -> None:
    from tests.helpers.inference import run_cli

    framed = cv2.copyMakeBorder(_cast_image(45, 70), 20, 16, 24, 30, cv2.BORDER_CONSTANT, value=0)
    path = tmp_path / "framed.png"
    assert cv2.imwrite(str(path), cv2.cvtColor(framed, cv2.COLOR_RGB2BGR))
    argv = ["predict", "--checkpoint", str(corrected_checkpoint), "--device", "cpu"]
    assert run_cli([*argv, "--images", str(path), "--output", str(tmp_path / "out")]) == 0
    written = cv2.imread(str(tmp_path / "out" / "framed_mask.png"), cv2.IMREAD_GRAYSCALE) > 0
    predictor = Predictor.from_checkpoint(corrected_checkpoint, device="cpu")
    assert written.shape == framed.shape[:2]
    assert np.array_equal(written, predictor.predict(framed) > 0)
    assert not written[:20].any() and not written[:, -30:].any()  # nothing in the frame
    uncropped = Predictor.from_checkpoint(corrected_checkpoint, device="cpu")
    uncropped.preprocessing = replace(uncropped.preprocessing, crop_dark_border=False)
    assert np.abs(uncropped.predict_proba(framed) - predictor.predict_proba(framed)).max() > 1e-3
