"""``skinet cv --tune-tta``: the folds' ensemble decides flips at prediction time on the
out-of-fold images, by the test ``evaluate --tune-tta`` uses, and predict, evaluate and export
follow the choice."""

from __future__ import annotations

import json
import shutil
from collections import Counter
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import pytest
import yaml
from tests.helpers.config import tiny_raw_config

from skinet.checkpoints.threshold import ENSEMBLE_THRESHOLD
from skinet.cli.main import main
from skinet.config.experiment import parse_config
from skinet.datasets.locate import index_dataset
from skinet.datasets.splits import read_split_file
from skinet.evaluation import evaluate, tuning
from skinet.evaluation.evaluate import read_labelled
from skinet.experiments.cv import cv_folder
from skinet.inference.export import sidecar_path
from skinet.inference.predictor import Predictor

FOLDS = 2


def _out_of_fold(cv_dir: Path, raw: dict[str, Any]) -> list[tuple[Predictor, list[Any]]]:
    """Each fold's best model with the samples of the chunk it did not train on."""
    _, splits = index_dataset(parse_config(raw))
    by_id = {s.id: s for name in ("train", "val") for s in splits[name]}
    folds = []
    for fold in range(1, FOLDS + 1):
        result = json.loads((cv_dir / "results" / f"fold_{fold}.json").read_text())
        chunk = read_split_file(cv_dir / "splits" / f"fold_{fold}.csv")
        samples = [by_id[i] for i, split in sorted(chunk.items()) if split == "val"]
        folds.append((Predictor.from_checkpoint(result["best_checkpoint"], device="cpu"), samples))
    return folds


def _draw_masks(cv_dir: Path, raw: dict[str, Any], tta: bool) -> int:
    """Replace every training image's mask by its out-of-fold model's own, with or without
    flips, at the threshold the cv chose on the synthetic masks: the way of predicting that is
    then perfect out of fold. Returns on how many images the two ways differ."""
    differ = 0
    threshold = _record(cv_dir)["value"]
    for predictor, samples in _out_of_fold(cv_dir, raw):
        predictor.threshold_choice = predictor.threshold_choice.given(threshold)
        images = [read_labelled(s)[0] for s in samples]
        masks = {}
        for way in (tta, not tta):
            predictor.tta = way
            masks[way] = predictor.predict_batch(images)
        for sample, drawn, other in zip(samples, masks[tta], masks[not tta], strict=True):
            cv2.imwrite(str(sample.mask_path), drawn * 255)
            differ += int(not np.array_equal(drawn, other))
    return differ


def _jaccard_gain(cv_dir: Path, raw: dict[str, Any], plain: float, flipped: float) -> float:
    """Flips' mean per-image Jaccard gain out of fold, each way at its own threshold."""
    gains = []
    for predictor, samples in _out_of_fold(cv_dir, raw):
        pairs = [read_labelled(s) for s in samples]
        scores = {}
        for way, threshold in ((False, plain), (True, flipped)):
            predictor.tta = way
            probs = predictor.predict_proba_batch([image for image, _ in pairs])
            scores[way] = [
                _jaccard(p >= threshold, mask > 0)
                for p, (_, mask) in zip(probs, pairs, strict=True)
            ]
        gains += [f - p for p, f in zip(scores[False], scores[True], strict=True)]
    return float(np.mean(gains))


def _jaccard(pred: np.ndarray, truth: np.ndarray) -> float:
    union = np.logical_or(pred, truth).sum()
    return 1.0 if union == 0 else float(np.logical_and(pred, truth).sum() / union)


@pytest.fixture
def cv_setup(tmp_path: Path, synthetic_root: Path) -> tuple[dict[str, Any], Path, Path]:
    """A finished 2-fold cv on a copy of the synthetic data whose masks the test may redraw,
    its config file and its folder."""
    data = tmp_path / "data"
    shutil.copytree(synthetic_root, data)
    raw = tiny_raw_config(tmp_path, data)
    raw["TRAIN_CONFIG"].update(max_epochs=2, use_mlflow_logger=False)
    config = tmp_path / "cv.yaml"
    config.write_text(yaml.safe_dump(raw))
    assert main(["cv", "--config", str(config), "--folds", str(FOLDS)]) == 0
    return raw, config, cv_folder(parse_config(raw), FOLDS)


def _record(cv_dir: Path) -> dict[str, Any]:
    return json.loads((cv_dir / "cv_results.json").read_text())[ENSEMBLE_THRESHOLD]


def test_cv_chooses_flips_out_of_fold_when_clearly_better_and_predict_follows(
    cv_setup: tuple[dict[str, Any], Path, Path],
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    raw, config, cv_dir = cv_setup
    assert "tta" not in _record(cv_dir), "without --tune-tta the cv decides nothing about flips"

    differ = _draw_masks(cv_dir, raw, tta=True)
    assert differ >= 6, "flips barely change these models' masks: the test would prove nothing"
    caplog.clear()
    argv = ["cv", "--config", str(config), "--folds", str(FOLDS), "--tune-tta"]
    assert main(argv) == 0
    assert "already finished" in caplog.text, "deciding flips must not retrain the folds"
    record = _record(cv_dir)
    assert record["tta"] is True
    assert record["value"] == record["threshold_with_tta"]
    assert record["mean_jaccard"] == pytest.approx(1.0)
    low, high = record["tta_interval"]
    assert 0.0 < low <= record["tta_gain"] <= high
    # The gain is each image's flipped Jaccard against its plain one, computed here from the
    # fold models themselves, at the threshold each way chose.
    plain = record["threshold_without_tta"]
    gain = _jaccard_gain(cv_dir, raw, plain, record["threshold_with_tta"])
    assert record["tta_gain"] == pytest.approx(gain, abs=1e-5)
    assert "flips at prediction time: mean per-image Jaccard +" in caplog.text

    # predict follows the choice, --no-tta overrides it; evaluate and export say so.
    images = str(index_dataset(parse_config(raw))[1]["train"][0].image_path.parent)
    caplog.clear()
    argv = ["predict", "--checkpoint", str(cv_dir), "--input", images]
    assert main([*argv, "--output", str(tmp_path / "flipped")]) == 0
    assert "tuned with flips; flips at prediction time (as its cross-validation chose)" in (
        caplog.text
    )
    assert json.loads((tmp_path / "flipped" / "predictions.json").read_text())["tta"] is True
    caplog.clear()
    assert main([*argv, "--output", str(tmp_path / "plain"), "--no-tta"]) == 0
    assert "without the flips it chose (--no-tta)" in caplog.text
    recorded = json.loads((tmp_path / "plain" / "predictions.json").read_text())
    assert recorded["tta"] is False
    assert recorded["threshold"]["value"] == pytest.approx(record["threshold_without_tta"])
    written = {
        way: [cv2.imread(str(p), cv2.IMREAD_GRAYSCALE) for p in sorted(folder.glob("*_mask.png"))]
        for way, folder in (("flipped", tmp_path / "flipped"), ("plain", tmp_path / "plain"))
    }
    assert len(written["flipped"]) == len(written["plain"]) == 8
    pairs = zip(written["flipped"], written["plain"], strict=True)
    assert any(not np.array_equal(a, b) for a, b in pairs), "predict --no-tta made the same masks"
    # Without the flips, the threshold the out-of-fold images chose without them.
    results = json.loads((cv_dir / "cv_results.json").read_text())
    results[ENSEMBLE_THRESHOLD]["threshold_without_tta"] = 0.3
    (cv_dir / "cv_results.json").write_text(json.dumps(results))
    assert main([*argv, "--output", str(tmp_path / "plain_again"), "--no-tta"]) == 0
    recorded = json.loads((tmp_path / "plain_again" / "predictions.json").read_text())
    assert recorded["threshold"]["value"] == pytest.approx(0.3)
    assert main([*argv, "--output", str(tmp_path / "flipped_again")]) == 0
    recorded = json.loads((tmp_path / "flipped_again" / "predictions.json").read_text())
    assert recorded["threshold"]["value"] == pytest.approx(record["value"])
    argv = ["evaluate", "--checkpoint", str(cv_dir), "--split", "test"]
    assert main([*argv, "--output", str(tmp_path / "report")]) == 0
    assert json.loads((tmp_path / "report" / "summary.json").read_text())["tta"] is True
    caplog.clear()
    exported = tmp_path / "ensemble.pt"
    argv = ["export", "--checkpoint", str(cv_dir), "--format", "torchscript"]
    assert main([*argv, "--output", str(exported)]) == 0
    assert json.loads(sidecar_path(exported).read_text())["tta"] is True
    assert "the cross-validation chose to predict with flips" in caplog.text


def test_cv_keeps_flips_off_when_they_do_not_pay_out_of_fold(
    cv_setup: tuple[dict[str, Any], Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    raw, config, cv_dir = cv_setup
    assert _draw_masks(cv_dir, raw, tta=False) >= 6
    reads: Counter[str] = Counter()

    def counted_read(sample: Any) -> Any:
        reads[sample.id] += 1
        return read_labelled(sample)

    for module in (evaluate, tuning):
        monkeypatch.setattr(module, "read_labelled", counted_read)
    argv = ["cv", "--config", str(config), "--folds", str(FOLDS), "--tune-tta"]
    assert main(argv) == 0
    # The out-of-fold pass scores and tunes both ways on each image read once.
    out_of_fold = [s.id for _, samples in _out_of_fold(cv_dir, raw) for s in samples]
    assert len(out_of_fold) >= 8 and {reads[i] for i in out_of_fold} == {1}, reads
    record = _record(cv_dir)
    assert record["tta"] is False and record["tta_gain"] < 0
    assert record["value"] == record["threshold_without_tta"]
    assert record["mean_jaccard"] == pytest.approx(1.0)
    assert record["tta_interval"][1] <= 0.0  # no image can gain on masks drawn without flips
    images = str(index_dataset(parse_config(raw))[1]["test"][0].image_path.parent)
    argv = ["predict", "--checkpoint", str(cv_dir), "--input", images]
    assert main([*argv, "--output", str(tmp_path / "masks")]) == 0
    assert json.loads((tmp_path / "masks" / "predictions.json").read_text())["tta"] is False
    # --tta predicts at the threshold the out-of-fold images chose with flips.
    results = json.loads((cv_dir / "cv_results.json").read_text())
    flipped = 0.3 if record["value"] != pytest.approx(0.3) else 0.7
    results[ENSEMBLE_THRESHOLD]["threshold_with_tta"] = flipped
    (cv_dir / "cv_results.json").write_text(json.dumps(results))
    assert main([*argv, "--output", str(tmp_path / "flipped"), "--tta"]) == 0
    recorded = json.loads((tmp_path / "flipped" / "predictions.json").read_text())
    assert recorded["tta"] is True and recorded["threshold"]["value"] == pytest.approx(flipped)


def test_cv_tune_tta_with_a_fixed_threshold_is_a_usage_error(
    tiny_raw: dict[str, Any], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    tiny_raw["TRAIN_CONFIG"].update(optimal_threshold=0.4, use_mlflow_logger=False)
    config = tmp_path / "cv.yaml"
    config.write_text(yaml.safe_dump(tiny_raw))
    assert main(["cv", "--config", str(config), "--folds", "2", "--tune-tta"]) == 2
    assert "TRAIN_CONFIG.optimal_threshold fixes at 0.4: set it to null" in caplog.text
    assert not cv_folder(parse_config(tiny_raw), 2).exists()
