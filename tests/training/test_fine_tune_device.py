"""Adapting to a new "device": 20 labelled images of it, calibration against fine-tuning.

A source model is trained on synthetic lesions. A second synthetic set is photographed by a
shifted device: the robustness report's strong colour cast and gamma, then an inverted tone
curve (lesions lighter than the skin), a change no threshold can undo. On this machine the
held-out Jaccards were 0.08 (source), 0.12 (calibrated) and 0.66 (fine-tuned). With 20
labelled images of that device, fine-tuning
(``skinet train --init-from``) must beat both the source model and the source model calibrated
on the same 20 images (``skinet evaluate --tune-threshold --save-calibrated``), scored with
``skinet evaluate`` on held-out images of the device.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import cv2
import numpy as np
import pytest
import yaml
from tests.helpers.config import tiny_raw_config

from skinet.cli.main import main
from skinet.datasets.synthetic import SPLIT_FOLDERS, make_synthetic_dataset
from skinet.evaluation.shifts import Shift, apply_shift, shift_rng

DEVICE = (Shift("color_cast", "strong", 60.0), Shift("gamma", "strong", 0.5))


def _photograph_with_device(root: Path) -> None:
    """Rewrite every image of ``root`` as the shifted device would take it."""
    for path in sorted(root.rglob("*.jpg")):
        image = cv2.cvtColor(cv2.imread(str(path)), cv2.COLOR_BGR2RGB)
        mask = np.zeros(image.shape[:2], np.uint8)
        for shift in DEVICE:
            image, _ = apply_shift(shift, image, mask, 32, shift_rng(0, shift, path.stem))
        image = 255 - image  # an inverted tone curve: lesions lighter than the skin
        cv2.imwrite(str(path), cv2.cvtColor(image, cv2.COLOR_RGB2BGR))


def _folder(root: Path, splits: tuple[str, ...], target: Path) -> tuple[Path, Path]:
    """The images and masks of ``splits`` as one labelled folder (images/, masks/)."""
    images, masks = target / "images", target / "masks"
    images.mkdir(parents=True)
    masks.mkdir()
    for split in splits:
        image_dir, mask_dir = SPLIT_FOLDERS[split]
        for path in (root / image_dir).glob("*.jpg"):
            shutil.copy(path, images / path.name)
        for path in (root / mask_dir).glob("*.png"):
            shutil.copy(path, masks / path.name)
    return images, masks


def _config(tmp_path: Path, data_dir: Path, name: str, **train: object) -> Path:
    raw = tiny_raw_config(tmp_path, data_dir)
    raw["TRAIN_CONFIG"].update(experiment_name=name, use_mlflow_logger=False, **train)
    raw["MODEL_CONFIG"].update(norm="instance", out_channels_layer1=8, number_of_layers=3)
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def _score(tmp_path: Path, checkpoint: Path, held_out: tuple[Path, Path], name: str) -> float:
    output = tmp_path / "scores" / name
    code = main(
        ["evaluate", "--checkpoint", str(checkpoint), "--images", str(held_out[0])]
        + ["--masks", str(held_out[1]), "--output", str(output), "--gallery", "0"]
    )
    assert code == 0
    return float(json.loads((output / "summary.json").read_text())["mean_jaccard"])


def _best(run_root: Path, experiment: str) -> Path:
    (checkpoint,) = run_root.glob(f"{experiment}_*/checkpoints/best-*.ckpt")
    return checkpoint


@pytest.mark.heavy
def test_fine_tuning_on_20_images_of_a_new_device_beats_the_source_and_its_calibration(
    tmp_path: Path,
) -> None:
    source_data = make_synthetic_dataset(tmp_path / "source_data", 32, 8, 0, 64, seed=0)
    device_data = make_synthetic_dataset(tmp_path / "device_data", 16, 4, 16, 64, seed=1)
    _photograph_with_device(device_data)
    labelled = _folder(device_data, ("train", "val"), tmp_path / "labelled")  # the 20 images
    held_out = _folder(device_data, ("test",), tmp_path / "held_out")
    runs = tmp_path / "runs"

    source_cfg = _config(tmp_path, source_data, "source", max_epochs=8, lr=3e-3)
    assert main(["train", "--config", str(source_cfg), "--no-visualize"]) == 0
    source = _best(runs, "source")

    calibrated = tmp_path / "calibrated.ckpt"
    code = main(
        ["evaluate", "--checkpoint", str(source), "--images", str(labelled[0])]
        + ["--masks", str(labelled[1]), "--tune-threshold", "--gallery", "0"]
        + ["--save-calibrated", str(calibrated), "--output", str(tmp_path / "tuned")]
    )
    assert code == 0

    tune_cfg = _config(tmp_path, device_data, "clinic", max_epochs=8, lr=1e-3)
    code = main(
        ["train", "--config", str(tune_cfg), "--init-from", str(source)] + ["--no-visualize"]
    )
    assert code == 0
    tuned = _best(runs, "clinic")

    scores = {
        name: _score(tmp_path, checkpoint, held_out, name)
        for name, checkpoint in (
            ("source", source),
            ("calibrated", calibrated),
            ("fine-tuned", tuned),
        )
    }
    print(scores)
    assert scores["fine-tuned"] > max(scores["source"], scores["calibrated"]) + 0.02, scores
