"""``skinet cv``: deterministic folds, the test split untouched, kill and resume."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import yaml
from tests.helpers.inference import rewrite_checkpoint

from skinet.checkpoints.read import load_checkpoint
from skinet.checkpoints.threshold import ENSEMBLE_THRESHOLD
from skinet.cli.main import main
from skinet.config.errors import UsageError
from skinet.config.experiment import ExperimentConfig, parse_config
from skinet.datasets.locate import index_dataset
from skinet.datasets.splits import read_split_file
from skinet.evaluation.evaluate import read_labelled
from skinet.evaluation.tuning import tune_on_maps
from skinet.experiments.cv import carve_folds, cv_folder
from skinet.inference.ensemble import build_predictor
from skinet.inference.export import sidecar_path
from skinet.inference.predictor import Predictor
from skinet.runtime.files import file_sha256

ROOT = Path(__file__).resolve().parents[2]


def test_folds_pool_train_and_val_and_keep_the_test_split(tiny_raw: dict[str, Any]) -> None:
    cfg = parse_config(tiny_raw)
    _, splits = index_dataset(cfg)
    pool = sorted(s.id for name in ("train", "val") for s in splits[name])
    folds = carve_folds(cfg, 3)
    assert folds == carve_folds(cfg, 3)  # deterministic
    assert sorted(i for f in folds for i in f["val"]) == pool  # every sample validated once
    for fold in folds:
        assert sorted(fold["train"] + fold["val"]) == pool and len(fold["val"]) == 4
        assert fold["test"] == sorted(s.id for s in splits["test"])
    other = parse_config(
        {**tiny_raw, "DATA_CONFIG": {**tiny_raw["DATA_CONFIG"], "split_random_seed": 7}}
    )
    assert carve_folds(other, 3) != folds
    with pytest.raises(UsageError, match="only 12 training"):
        carve_folds(cfg, 13)


@pytest.mark.heavy
def test_cv_killed_after_the_first_fold_resumes_without_retraining_it(
    tiny_raw: dict[str, Any], tmp_path: Path, mlflow_db_template: Path, capsys: Any
) -> None:
    from mlflow.tracking import MlflowClient

    tiny_raw["TRAIN_CONFIG"].update({"max_epochs": 1, "use_early_stopping": False})
    output_dir = Path(tiny_raw["TRAIN_CONFIG"]["output_dir"])
    output_dir.mkdir(parents=True)
    shutil.copyfile(mlflow_db_template, output_dir / "mlflow.db")
    config = tmp_path / "cv.yaml"
    config.write_text(yaml.safe_dump(tiny_raw))
    cv_dir = cv_folder(parse_config(tiny_raw), 3)
    first_result = cv_dir / "results" / "fold_1.json"
    argv = ["cv", "--config", str(config), "--folds", "3"]
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    env.pop("MLFLOW_TRACKING_URI", None)
    worker = subprocess.Popen(
        [sys.executable, "-m", "skinet.cli.main", *argv],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        cwd=tmp_path,
    )
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and not first_result.exists() and worker.poll() is None:
            time.sleep(0.1)
    finally:
        worker.send_signal(signal.SIGKILL)
        worker.wait(timeout=30)
    assert first_result.exists(), "fold 1 did not finish"
    assert not (cv_dir / "results" / "fold_3.json").exists()
    fold_1 = first_result.read_text()

    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "folds already finished and not retrained: [1]" in out
    assert first_result.read_text() == fold_1
    summary = json.loads((cv_dir / "cv_results.json").read_text())
    assert sorted(summary["per_fold"]) == ["1", "2", "3"]
    monitor = "val_best_dice_at_threshold"
    values = [summary["per_fold"][f][monitor] for f in "123"]
    assert summary["mean"][monitor] == pytest.approx(sum(values) / 3)
    assert "test_dice" in summary["std"]
    assert "mean" in (cv_dir / "cv_results.csv").read_text()

    client = MlflowClient(f"sqlite:///{output_dir / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("tiny")
    runs = client.search_runs([experiment.experiment_id])
    parent = next(r for r in runs if r.info.run_name == cv_dir.name)
    children = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id]
    names = sorted(r.info.run_name for r in children if r.info.status == "FINISHED")
    assert names == ["fold_1", "fold_2", "fold_3"]  # fold 1 trained once
    assert f"{monitor}_mean" in parent.data.metrics and parent.info.status == "FINISHED"


@pytest.mark.heavy
def test_a_rerun_with_another_config_refuses_the_old_folds_and_names_the_fields(
    tiny_raw: dict[str, Any], tmp_path: Path, caplog: Any
) -> None:
    from skinet.experiments.cv import config_hash

    tiny_raw["TRAIN_CONFIG"].update(max_epochs=1, use_mlflow_logger=False)
    config = tmp_path / "cv.yaml"
    config.write_text(yaml.safe_dump(tiny_raw))
    argv = ["cv", "--config", str(config), "--folds", "2"]
    assert main(argv) == 0
    cv_dir = cv_folder(parse_config(tiny_raw), 2)
    fold_1 = (cv_dir / "results" / "fold_1.json").read_text()
    old_hash = config_hash(parse_config(tiny_raw))
    assert json.loads(fold_1)["config_sha256"] == old_hash

    # Out-of-fold: every pooled training image scored once, by the fold that did not train on it.
    oof = json.loads((cv_dir / "out_of_fold" / "summary.json").read_text())
    assert oof["num_images"] == 12 and oof["num_failed"] == 0
    assert oof["selection"].startswith("optimistic: each fold's best epoch and threshold")
    rows = (cv_dir / "out_of_fold" / "per_image.csv").read_text().splitlines()[1:]
    assert len(rows) == 12 and len({row.split(",")[0] for row in rows}) == 12
    # The ensemble of the folds: its val split is leaked, its test split is not.
    evaluate = ["evaluate", "--checkpoint", str(cv_dir), "--output", str(tmp_path / "eval")]
    caplog.clear()
    assert main([*evaluate, "--split", "val"]) == 2
    assert "out_of_fold/summary.json" in caplog.text and "--split test" in caplog.text
    assert main([*evaluate, "--split", "val", "--allow-leak", "--gallery", "0"]) == 0
    assert main([*evaluate, "--split", "test", "--gallery", "0"]) == 0
    robustness = ["robustness", "--checkpoint", str(cv_dir), "--shifts", "gamma"]
    assert main([*robustness, "--split", "val", "--output", str(tmp_path / "rob")]) == 2

    changed = [*argv, "--set", "TRAIN_CONFIG.lr=0.05", "--set", "TRAIN_CONFIG.max_epochs=2"]
    caplog.clear()
    assert main(changed) == 2
    assert "TRAIN_CONFIG.lr: 0.001 -> 0.05; TRAIN_CONFIG.max_epochs: 1 -> 2" in caplog.text
    assert (cv_dir / "results" / "fold_1.json").read_text() == fold_1  # nothing touched
    # A logging-only change reuses the folds.
    assert main([*argv, "--set", "TRAIN_CONFIG.log_every_n_steps=7"]) == 0
    assert (cv_dir / "results" / "fold_1.json").read_text() == fold_1
    assert main(argv) == 0  # the same config still resumes: every fold finished


def test_a_fold_file_without_its_config_is_compared_by_the_whole_config_hash(
    tiny_raw: dict[str, Any], tmp_path: Path
) -> None:
    """Fold files of an older SkiNet hashed the whole config and recorded no config."""
    import hashlib

    from skinet.experiments.cv import _check_same_config

    cfg = parse_config(tiny_raw)
    whole = json.dumps(cfg.to_yaml_dict(), sort_keys=True, default=str).encode()
    result_path = tmp_path / "cv" / "results" / "fold_1.json"
    _check_same_config({"config_sha256": hashlib.sha256(whole).hexdigest()}, cfg, result_path)
    with pytest.raises(UsageError, match="has SHA-256 [0-9a-f]{64}, the folds' 0+"):
        _check_same_config({"config_sha256": "0" * 64}, cfg, result_path)


def _out_of_fold_maps(
    cfg: ExperimentConfig, cv_dir: Path, folds: int
) -> list[tuple[np.ndarray, np.ndarray]]:
    """Each image's probabilities from the fold model that did not train on it, with its mask."""
    _, splits = index_dataset(cfg)
    by_id = {s.id: s for name in ("train", "val") for s in splits[name]}
    maps = []
    for fold in range(1, folds + 1):
        result = json.loads((cv_dir / "results" / f"fold_{fold}.json").read_text())
        predictor = Predictor.from_checkpoint(result["best_checkpoint"], device="cpu")
        chunk = read_split_file(cv_dir / "splits" / f"fold_{fold}.csv")
        pairs = [read_labelled(by_id[i]) for i, split in chunk.items() if split == "val"]
        probs = predictor.predict_proba_batch([image for image, _ in pairs])
        maps += [(p, mask) for p, (_, mask) in zip(probs, pairs, strict=True)]
    return maps


def test_cv_fine_tunes_every_fold_from_init_from(
    tiny_raw: dict[str, Any], tmp_path: Path, trained_checkpoint: Path
) -> None:
    """``skinet cv --init-from``: k-fold fine-tuning on a clinic's images, as ``train`` takes it."""
    tiny_raw["TRAIN_CONFIG"].update(
        max_epochs=1, use_mlflow_logger=False, threshold_selection="guarded", lr=1e-12
    )
    config = tmp_path / "cv.yaml"
    config.write_text(yaml.safe_dump(tiny_raw))
    # A source threshold no default could stand in for.
    trained_checkpoint = rewrite_checkpoint(
        trained_checkpoint, tmp_path / "source.ckpt", val_optimal_threshold=0.36
    )
    argv = ["cv", "--config", str(config), "--folds", "2", "--init-from", str(trained_checkpoint)]
    assert main(argv) == 0
    cv_dir = cv_folder(parse_config(tiny_raw), 2)
    for fold in (1, 2):
        result = json.loads((cv_dir / "results" / f"fold_{fold}.json").read_text())
        run_dir = Path(result["run_dir"])
        lineage = json.loads((run_dir / "init_from.json").read_text())
        assert Path(lineage["checkpoint"]) == trained_checkpoint.resolve()
        assert lineage["sha256"] == file_sha256(trained_checkpoint)
        run_config = yaml.safe_load((run_dir / "config.yaml").read_text())
        assert run_config["TRAIN_CONFIG"]["init_checkpoint"] == str(trained_checkpoint)
        # lr 1e-12: a fold's weights are still the source's, so it started from them (batch
        # norm's running statistics move without the learning rate).
        before = load_checkpoint(trained_checkpoint).state_dict
        after = load_checkpoint(result["best_checkpoint"]).state_dict
        for name, weight in before.items():
            if "running_" not in name and "num_batches" not in name:
                torch.testing.assert_close(after[name], weight, rtol=0, atol=1e-6)
    # The ensemble's threshold keeps the source model's unless the out-of-fold images show a
    # clear gain, as each fold's sweep does: the guarded rule, measured against the source's.
    chosen = json.loads((cv_dir / "cv_results.json").read_text())[ENSEMBLE_THRESHOLD]
    source = load_checkpoint(trained_checkpoint).threshold
    assert source == pytest.approx(0.36)
    assert chosen["selection"] == "guarded"
    assert chosen["source_threshold"] == pytest.approx(source, abs=1e-6)
    maps = _out_of_fold_maps(parse_config(tiny_raw), cv_dir, 2)
    expected = tune_on_maps(maps, "guarded", reference=source).threshold
    assert chosen["value"] == pytest.approx(expected, abs=1e-6)


def test_the_folds_ensemble_predicts_at_the_threshold_chosen_out_of_fold(
    tiny_raw: dict[str, Any], tmp_path: Path
) -> None:
    """One threshold chosen on every image's out-of-fold probabilities, not the mean of the
    folds' thresholds; ``predict``, ``evaluate`` and ``export`` use it and say where it came
    from."""
    tiny_raw["TRAIN_CONFIG"].update(max_epochs=2, use_mlflow_logger=False)
    config = tmp_path / "cv.yaml"
    config.write_text(yaml.safe_dump(tiny_raw))
    assert main(["cv", "--config", str(config), "--folds", "2"]) == 0
    cfg = parse_config(tiny_raw)
    cv_dir = cv_folder(cfg, 2)
    chosen = json.loads((cv_dir / "cv_results.json").read_text())[ENSEMBLE_THRESHOLD]
    assert chosen["num_images"] == 12 and chosen["selection"] == "pooled_dice"

    # The same choice, made here from each fold's model on the chunk it did not train on.
    maps = _out_of_fold_maps(cfg, cv_dir, 2)
    assert chosen["value"] == pytest.approx(tune_on_maps(maps).threshold, abs=1e-6)
    _, splits = index_dataset(cfg)

    ensemble = build_predictor([cv_dir], device="cpu")
    assert ensemble.threshold_choice.source == "out-of-fold"
    assert ensemble.threshold == pytest.approx(chosen["value"], abs=1e-6)
    assert len(ensemble.threshold_choice.members) == 2
    output = tmp_path / "masks"
    images = str(splits["test"][0].image_path.parent)
    argv = ["predict", "--checkpoint", str(cv_dir), "--input", images, "--output", str(output)]
    assert main(argv) == 0
    recorded = json.loads((output / "predictions.json").read_text())["threshold"]
    assert recorded["source"] == "out-of-fold"
    assert recorded["calibration"]["num_images"] == 12
    report = tmp_path / "report"
    argv = ["evaluate", "--checkpoint", str(cv_dir), "--split", "test", "--output", str(report)]
    assert main(argv) == 0
    scored = json.loads((report / "summary.json").read_text())["threshold_choice"]
    assert scored["source"] == "out-of-fold" and scored["value"] == recorded["value"]
    exported = tmp_path / "ensemble.pt"
    argv = ["export", "--checkpoint", str(cv_dir), "--format", "torchscript"]
    assert main([*argv, "--output", str(exported)]) == 0
    sidecar = json.loads(sidecar_path(exported).read_text())
    assert sidecar["threshold_source"]["source"] == "out-of-fold"
    assert sidecar["threshold"] == pytest.approx(chosen["value"], abs=1e-6)

    # A cv folder from before the record keeps the mean of the folds' thresholds.
    summary = json.loads((cv_dir / "cv_results.json").read_text())
    del summary[ENSEMBLE_THRESHOLD]
    (cv_dir / "cv_results.json").write_text(json.dumps(summary))
    assert build_predictor([cv_dir], device="cpu").threshold_choice.source == "ensemble mean"
