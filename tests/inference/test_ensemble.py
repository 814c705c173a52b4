"""Ensembles of checkpoints: mean probabilities, evaluation, threshold tuning and ONNX export."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import numpy as np
import pytest
from tests.helpers.config import requires_modules, tiny_raw_config
from tests.helpers.inference import rewrite_checkpoint, run_cli, write_rgb

from skinet.checkpoints.read import load_checkpoint
from skinet.config.experiment import parse_config
from skinet.inference.ensemble import EnsembleError, EnsemblePredictor
from skinet.inference.export import card_path, export_checkpoint, sidecar_path
from skinet.inference.predictor import Predictor

NEEDS_ONNX = requires_modules("onnx", "onnxscript", "onnxruntime")


@pytest.fixture(scope="session")
def second_checkpoint(tmp_path_factory: pytest.TempPathFactory, synthetic_root: Path) -> Path:
    """Another real checkpoint of the tiny config, trained with another seed."""
    from skinet.training.run import run_training

    raw = tiny_raw_config(tmp_path_factory.mktemp("trained_seed7"), synthetic_root)
    raw["TRAIN_CONFIG"].update(max_epochs=1, use_mlflow_logger=False, seed=7)
    result = run_training(parse_config(raw), visualize=False)
    assert result.best_checkpoint is not None
    return result.best_checkpoint


@pytest.mark.parametrize("tta", [False, True])
def test_ensemble_probabilities_are_the_mean_of_the_members(
    trained_checkpoint: Path, second_checkpoint: Path, tmp_path: Path, tta: bool
) -> None:
    images = [write_rgb(tmp_path / f"{i}.png", 37 + i, 45, seed=i) for i in range(3)]
    members = [
        Predictor.from_checkpoint(p, device="cpu", tta=tta)
        for p in (trained_checkpoint, second_checkpoint)
    ]
    ensemble = EnsemblePredictor.from_checkpoints(
        [trained_checkpoint, second_checkpoint], device="cpu", tta=tta
    )
    first, second = (m.predict_proba_batch(images) for m in members)
    assert not np.allclose(first[0], second[0])  # two different models
    for got, a, b in zip(ensemble.predict_proba_batch(images), first, second, strict=True):
        np.testing.assert_allclose(got, (a + b) / 2, atol=1e-6)
    assert ensemble.threshold == pytest.approx((members[0].threshold + members[1].threshold) / 2)
    # The other way, asked for one batch (as tuning with and without flips does), is the mean
    # of the members' other way, and the ensemble's own way is left as it was.
    prepared = [ensemble.prepare(image) for image in images]
    other = ensemble.forward_prepared(prepared, tta=not tta)
    for member in members:
        member.tta = not tta
    first, second = (m.predict_proba_batch(images) for m in members)
    assert ensemble.tta is tta
    for probs, (_, placement), a, b in zip(other, prepared, first, second, strict=True):
        np.testing.assert_allclose(ensemble.restore(probs, placement), (a + b) / 2, atol=1e-6)


def test_members_with_another_preprocessing_are_refused(
    trained_checkpoint: Path, tmp_path: Path
) -> None:
    config = load_checkpoint(trained_checkpoint).config.to_yaml_dict()
    config["DATA_CONFIG"]["image_size"] = 64
    other = rewrite_checkpoint(trained_checkpoint, tmp_path / "other.ckpt", config=config)
    with pytest.raises(EnsembleError, match="must share their preprocessing.*other.ckpt"):
        EnsemblePredictor.from_checkpoints([trained_checkpoint, other], device="cpu")
    with pytest.raises(EnsembleError, match="checkpoint not found"):
        EnsemblePredictor.from_checkpoints([tmp_path / "absent.ckpt"], device="cpu")


def test_evaluate_cli_scores_an_ensemble_and_tunes_its_threshold(
    trained_checkpoint: Path, second_checkpoint: Path, tmp_path: Path, capsys
) -> None:
    argv = ["evaluate", "--checkpoint", str(trained_checkpoint), str(second_checkpoint)]
    argv += ["--split", "val", "--gallery", "0", "--device", "cpu"]
    assert run_cli([*argv, "--output", str(tmp_path / "mean")]) == 0
    info = json.loads((tmp_path / "mean" / "summary.json").read_text())
    assert info["checkpoint"] == [str(trained_checkpoint), str(second_checkpoint)]
    members = [load_checkpoint(p).threshold for p in (trained_checkpoint, second_checkpoint)]
    assert info["threshold"] == pytest.approx(sum(members) / 2)

    assert run_cli([*argv, "--tune-threshold", "--output", str(tmp_path / "tuned")]) == 0
    out = capsys.readouterr().out
    assert "tuned threshold on split 'val' (4 images)" in out
    tuned = json.loads((tmp_path / "tuned" / "summary.json").read_text())
    assert tuned["threshold_tuned_on"] == "val"
    assert f"{tuned['threshold']:.2f}" in out
    assert run_cli([*argv, "--tune-threshold", "--threshold", "0.3", "--output", "x"]) == 2


@pytest.mark.heavy
@NEEDS_ONNX
def test_ensemble_exports_as_one_onnx_graph_with_parity(
    trained_checkpoint: Path, second_checkpoint: Path, tmp_path: Path
) -> None:
    from skinet.inference.export import run_exported

    output = tmp_path / "ensemble.onnx"
    parity = export_checkpoint([trained_checkpoint, second_checkpoint], output, "onnx")
    assert parity is not None and parity.passed
    sidecar = json.loads(sidecar_path(output).read_text())
    assert sidecar["checkpoint"] == [str(trained_checkpoint), str(second_checkpoint)]
    card = card_path(output).read_text()
    assert "Ensemble of 2 models" in card
    assert "beside this card" not in card  # no config.yaml sits beside an export
    assert "with this config saved as `config.yaml`" in card

    ensemble = EnsemblePredictor.from_checkpoints(
        [trained_checkpoint, second_checkpoint], device="cpu"
    )
    image = write_rgb(tmp_path / "x.png", 32, 32)
    batch = ensemble.preprocess(image)[None]
    probs = run_exported(output, "onnx", __import__("torch").from_numpy(batch))
    np.testing.assert_allclose(probs[0, 0].numpy(), ensemble.predict_proba(image), atol=1e-5)


def test_predict_cli_takes_a_cv_folder_as_an_ensemble(
    trained_checkpoint: Path, second_checkpoint: Path, tmp_path: Path, monkeypatch
) -> None:
    monkeypatch.chdir(tmp_path)
    cv_dir = tmp_path / "cv_tiny_k2"
    (cv_dir / "results").mkdir(parents=True)
    for fold, path in enumerate((trained_checkpoint, second_checkpoint), start=1):
        record = {"fold": fold, "best_checkpoint": str(path)}
        (cv_dir / "results" / f"fold_{fold}.json").write_text(json.dumps(record))
    (tmp_path / "images").mkdir()
    write_rgb(tmp_path / "images" / "a.png", 40, 52)
    common = ["--images", str(tmp_path / "images"), "--device", "cpu", "--save-proba", "npy"]
    assert run_cli(["predict", "--checkpoint", str(cv_dir), *common, "--output", "f"]) == 0
    listed = [str(trained_checkpoint), str(second_checkpoint)]
    assert run_cli(["predict", "--checkpoint", *listed, *common, "--output", "l"]) == 0
    np.testing.assert_array_equal(np.load("f/a_proba.npy"), np.load("l/a_proba.npy"))
    (cv_dir / "results" / "fold_1.json").unlink()
    (cv_dir / "results" / "fold_2.json").unlink()
    with pytest.raises(EnsembleError, match="not a finished `skinet cv` folder"):
        EnsemblePredictor.from_checkpoints([cv_dir], device="cpu")


def test_incompatible_ensemble_through_the_cli_is_a_usage_error(
    trained_checkpoint: Path, tmp_path: Path
) -> None:
    config = load_checkpoint(trained_checkpoint).config.to_yaml_dict()
    config["DATA_CONFIG"]["normalization_mode"] = "image_per_channel"
    other = rewrite_checkpoint(trained_checkpoint, tmp_path / "other.ckpt", config=config)
    image = tmp_path / "a.png"
    write_rgb(image, 32, 32)
    argv = ["predict", "--checkpoint", str(trained_checkpoint), str(other), "--images", str(image)]
    assert run_cli([*argv, "--output", str(tmp_path / "one")]) == 2
    assert not (tmp_path / "one").exists()
    assert run_cli([*argv[:3], *argv[4:], "--output", str(tmp_path / "two")]) == 0


@pytest.mark.parametrize(
    ("fixed", "given", "expected"),
    [
        (None, None, "threshold 0.420 (the checkpoint's validation-optimal one)"),
        (0.42, None, "threshold 0.420 (fixed by the checkpoint's TRAIN_CONFIG)"),
        (0.42, 0.3, "threshold 0.300 (--threshold)"),
    ],
)
def test_predict_logs_whether_the_threshold_was_swept_or_fixed(
    trained_checkpoint: Path,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    fixed: float | None,
    given: float | None,
    expected: str,
) -> None:
    config = load_checkpoint(trained_checkpoint).config.to_yaml_dict()
    config["TRAIN_CONFIG"]["optimal_threshold"] = fixed
    path = rewrite_checkpoint(
        trained_checkpoint, tmp_path / "t.ckpt", config=config, val_optimal_threshold=0.42
    )
    (tmp_path / "in").mkdir()
    write_rgb(tmp_path / "in" / "a.png", 40, 48)
    argv = ["predict", "--checkpoint", str(path), "--images", str(tmp_path / "in")]
    argv += ["--output", str(tmp_path / "out"), "--device", "cpu"]
    if given is not None:
        argv += ["--threshold", str(given)]
    with caplog.at_level(logging.INFO):
        assert run_cli(argv) == 0
    assert expected in caplog.text


def test_an_ensemble_of_one_config_twice_is_named(
    trained_checkpoint: Path, second_checkpoint: Path, tmp_path: Path, caplog
) -> None:
    # A run made again from the same config, as runs/<name>_*/checkpoints/best-*.ckpt would
    # match: another file, the same model.
    again = tmp_path / "again" / "best.ckpt"
    again.parent.mkdir()
    shutil.copyfile(trained_checkpoint, again)
    image = tmp_path / "in.png"
    write_rgb(image, 40, 40)
    argv = ["predict", "--images", str(image), "--device", "cpu", "--checkpoint"]
    assert run_cli([*argv, str(trained_checkpoint), str(again), "-o", str(tmp_path / "a")]) == 0
    assert f"{trained_checkpoint} and {again} were trained from the same config" in caplog.text
    caplog.clear()
    other = [str(trained_checkpoint), str(second_checkpoint)]  # another seed
    assert run_cli([*argv, *other, "-o", str(tmp_path / "b")]) == 0
    assert "trained from the same config" not in caplog.text
