"""``predictions.json``: the threshold, its source and the checkpoint that made the masks; and
the output folders ``skinet predict`` agrees to write into."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import cv2
import numpy as np
import pytest
from tests.helpers.inference import rewrite_checkpoint, run_cli, write_rgb

from skinet import __version__
from skinet.checkpoints.read import load_checkpoint
from skinet.evaluation.calibration import save_calibrated_checkpoint
from skinet.inference.predict_record import PREDICTIONS_FILE

CALIBRATED = 0.3


@pytest.fixture
def images(tmp_path: Path) -> Path:
    folder = tmp_path / "in"
    folder.mkdir()
    for i, (height, width) in enumerate([(40, 52), (37, 37), (60, 45)]):
        write_rgb(folder / f"img{i}.png", height, width, seed=i)
    return folder


@pytest.fixture
def calibrated_checkpoint(tmp_path: Path, trained_checkpoint: Path) -> Path:
    source = load_checkpoint(trained_checkpoint)
    assert source.threshold != CALIBRATED  # else a record of the source's would pass too
    record = {"threshold": CALIBRATED, "tuned_on": "/clinic/images", "num_images": 4}
    record.update(source_checkpoint=str(trained_checkpoint), source_threshold=source.threshold)
    return save_calibrated_checkpoint(trained_checkpoint, tmp_path / "clinic.ckpt", record)


def _predict(checkpoint: Path, images: Path, output: Path, *extra: str) -> dict:
    argv = ["predict", "--checkpoint", str(checkpoint), "--input", str(images)]
    argv += ["--output", str(output), "--device", "cpu", "--save-proba", "npy", *extra]
    assert run_cli(argv) == 0
    record = json.loads((output / PREDICTIONS_FILE).read_text())
    # The masks are the probabilities at the recorded threshold.
    threshold = record["threshold"]["value"]
    for proba in sorted(output.glob("*_proba.npy")):
        mask = cv2.imread(str(output / proba.name.replace("_proba.npy", "_mask.png")), 0) > 0
        assert np.array_equal(mask, np.load(proba) >= threshold), proba.name
    return record


@pytest.mark.parametrize("kind", ["plain", "calibrated", "given"])
def test_predictions_json_holds_the_threshold_and_source_that_made_the_masks(
    tmp_path: Path,
    trained_checkpoint: Path,
    calibrated_checkpoint: Path,
    images: Path,
    kind: str,
) -> None:
    checkpoint = calibrated_checkpoint if kind == "calibrated" else trained_checkpoint
    extra = ["--threshold", "0.7", "--tta", "--keep-largest"] if kind == "given" else []
    record = _predict(checkpoint, images, tmp_path / "out", *extra)
    threshold = record["threshold"]
    if kind == "plain":
        own = load_checkpoint(trained_checkpoint)
        value = round(own.threshold, 6)
        swept = {"value": value, "source": "validation sweep", "selection": "pooled_dice"}
        assert threshold == swept
        assert own.threshold == own.val_optimal_threshold
    elif kind == "calibrated":
        assert threshold["value"] == CALIBRATED and threshold["source"] == "calibrated"
        assert threshold["calibration"]["tuned_on"] == "/clinic/images"
        assert threshold["calibration"]["num_images"] == 4
    else:
        assert threshold == {"value": 0.7, "source": "fixed", "set_by": "--threshold"}
    assert record["tta"] is (kind == "given")
    assert record["post_processing"] == {"keep_largest": kind == "given", "fill_holes": False}
    [entry] = record["checkpoints"]
    assert entry["path"] == str(checkpoint.resolve())
    assert entry["sha256"] == hashlib.sha256(checkpoint.read_bytes()).hexdigest()
    config = load_checkpoint(checkpoint).config.data
    assert record["preprocessing"]["image_size"] == config.image_size
    assert record["preprocessing"]["normalization_mode"] == config.normalization_mode
    assert record["skinet_version"] == __version__
    assert record["num_images"] == record["num_masks"] == 3 and record["failures"] == {}
    assert record["outputs"]["save_proba"] == "npy" and not list(tmp_path.glob("out/.*"))


def test_an_ensembles_record_lists_its_members_and_their_mean(
    tmp_path: Path, trained_checkpoint: Path, calibrated_checkpoint: Path, images: Path
) -> None:
    argv = ["predict", "--checkpoint", str(trained_checkpoint), str(calibrated_checkpoint)]
    argv += ["--input", str(images), "--output", str(tmp_path / "out"), "--device", "cpu"]
    assert run_cli(argv) == 0
    record = json.loads((tmp_path / "out" / PREDICTIONS_FILE).read_text())
    members = record["threshold"]["members"]
    assert [m["source"] for m in members] == ["validation sweep", "calibrated"]
    assert record["threshold"]["source"] == "ensemble mean"
    assert record["threshold"]["value"] == pytest.approx((members[0]["value"] + CALIBRATED) / 2)
    assert [c["path"] for c in record["checkpoints"]] == [
        str(p.resolve()) for p in (trained_checkpoint, calibrated_checkpoint)
    ]


def test_predict_refuses_a_folder_of_files_it_did_not_write(
    tmp_path: Path, trained_checkpoint: Path, images: Path, caplog: pytest.LogCaptureFixture
) -> None:
    truth = tmp_path / "truth"
    truth.mkdir()
    for i in range(3):
        (truth / f"img{i}_mask.png").write_bytes(b"hand-drawn")
    argv = ["predict", "--checkpoint", str(trained_checkpoint), "--input", str(images)]
    argv += ["--device", "cpu"]
    # The ground-truth masks and the input images are kept.
    for output in (truth, images):
        before = {p.name: p.read_bytes() for p in output.iterdir()}
        assert run_cli([*argv, "--output", str(output)]) == 2
        assert {p.name: p.read_bytes() for p in output.iterdir()} == before
        assert f"--output {output}" in caplog.text and "--overwrite" in caplog.text
    # A folder a previous prediction wrote is reused: its masks are replaced.
    out = tmp_path / "out"
    assert run_cli([*argv, "--output", str(out)]) == 0
    first = json.loads((out / PREDICTIONS_FILE).read_text())
    assert run_cli([*argv, "--output", str(out), "--threshold", "0.9"]) == 0
    again = json.loads((out / PREDICTIONS_FILE).read_text())
    assert first["threshold"]["source"] != "fixed" and again["threshold"]["value"] == 0.9
    # --overwrite writes among other files, and the folder is then SkiNet's.
    assert run_cli([*argv, "--output", str(truth), "--overwrite"]) == 0
    assert (truth / "img0_mask.png").read_bytes() != b"hand-drawn"
    assert (truth / PREDICTIONS_FILE).is_file()


def test_thresholds_are_recorded_without_float32_noise(
    tmp_path: Path, trained_checkpoint: Path, images: Path
) -> None:
    import torch

    noisy = float(torch.tensor(0.44, dtype=torch.float32))  # 0.4399999976158142
    assert noisy != 0.44
    checkpoint = rewrite_checkpoint(
        trained_checkpoint, tmp_path / "n.ckpt", val_optimal_threshold=noisy
    )
    text = (_run_and_read(checkpoint, images, tmp_path / "out")).read_text()
    assert '"value": 0.44,' in text and "0.43999" not in text


def _run_and_read(checkpoint: Path, images: Path, output: Path, *extra: str) -> Path:
    argv = ["predict", "--checkpoint", str(checkpoint), "--images", str(images)]
    assert run_cli([*argv, "--output", str(output), "--device", "cpu", *extra]) == 0
    return output / PREDICTIONS_FILE


def test_predicting_again_removes_only_the_files_the_earlier_run_wrote(
    tmp_path: Path, trained_checkpoint: Path, images: Path
) -> None:
    out = tmp_path / "out"
    first = json.loads(
        _run_and_read(trained_checkpoint, images, out, "--save-overlay", "--save-proba").read_text()
    )
    assert first["complete"] is True
    assert sorted(first["written"]) == sorted(
        f"img{i}_{kind}.png" for i in range(3) for kind in ("mask", "proba", "overlay")
    )
    (out / "notes.txt").write_text("mine")  # not listed by the record: kept
    (out / "other_overlay.png").write_bytes(b"mine")
    again = json.loads(_run_and_read(trained_checkpoint, images, out).read_text())
    assert again["complete"] is True and again["outputs"]["save_overlay"] is False
    assert sorted(again["written"]) == [f"img{i}_mask.png" for i in range(3)]
    assert sorted(p.name for p in out.iterdir()) == sorted(
        [*again["written"], PREDICTIONS_FILE, "notes.txt", "other_overlay.png"]
    )
    assert (
        again["arguments"]["input"] == str(images) and again["arguments"]["save_overlay"] is False
    )


def test_a_folder_of_a_stopped_run_is_taken_up_again(
    tmp_path: Path, trained_checkpoint: Path, images: Path
) -> None:
    """A stopped run's record: ``"complete": false`` and the files it was writing."""
    out = tmp_path / "out"
    record = _run_and_read(trained_checkpoint, images, out, "--save-overlay")
    stopped = json.loads(record.read_text())
    stopped.update(complete=False, written=[*stopped["written"], "img9_mask.png"])
    record.write_text(json.dumps(stopped))
    (out / "img9_mask.png").write_bytes(b"stale")  # an image removed since
    again = json.loads(_run_and_read(trained_checkpoint, images, out).read_text())
    assert again["complete"] is True
    assert sorted(p.name for p in out.iterdir()) == sorted([*again["written"], PREDICTIONS_FILE])


def test_a_record_of_an_older_skinet_without_its_file_list_keeps_and_names_the_others(
    tmp_path: Path, trained_checkpoint: Path, images: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Before ``written``, a record did not say which files were its own: nothing is removed,
    and the files this run does not replace are named, not left to pass for this run's."""
    out = tmp_path / "out"
    record = _run_and_read(trained_checkpoint, images, out)
    older = json.loads(record.read_text())
    del older["written"], older["complete"]
    record.write_text(json.dumps(older))
    (out / "gone_mask.png").write_bytes(b"from an image since removed")
    _run_and_read(trained_checkpoint, images, out)
    assert (out / "gone_mask.png").read_bytes() == b"from an image since removed"
    assert "1 prediction file(s) this run does not replace (gone_mask.png)" in caplog.text
    assert "img0_mask.png" not in caplog.text  # replaced by this run: not named


def test_a_record_never_removes_files_outside_what_predict_writes(
    tmp_path: Path, trained_checkpoint: Path, images: Path
) -> None:
    out = tmp_path / "out"
    record = _run_and_read(trained_checkpoint, images, out)
    edited = json.loads(record.read_text())
    (tmp_path / "outside_mask.png").write_bytes(b"mine")
    (out / "notes.txt").write_text("mine")
    edited["written"] += ["../outside_mask.png", "notes.txt", "/etc/hostname"]
    record.write_text(json.dumps(edited))
    _run_and_read(trained_checkpoint, images, out)
    assert (tmp_path / "outside_mask.png").read_bytes() == b"mine"
    assert (out / "notes.txt").read_text() == "mine"


@pytest.mark.parametrize("command", ["predict", "evaluate"])
def test_an_output_that_is_a_file_is_refused_before_any_work(
    tmp_path: Path, trained_checkpoint: Path, images: Path, command: str, caplog
) -> None:
    target = tmp_path / "result"
    target.write_text("mine")
    argv = [command, "--checkpoint", str(trained_checkpoint), "--device", "cpu"]
    if command == "predict":
        argv += ["--images", str(images)]
    else:
        argv += ["--images", str(images), "--masks", str(images)]
    assert run_cli([*argv, "--output", str(target)]) == 2
    assert f"--output {target} is a file: give a folder" in caplog.text
    assert target.read_text() == "mine"


@pytest.mark.heavy
def test_ctrl_c_leaves_a_record_marked_incomplete_and_a_rerun_completes_the_folder(
    tmp_path: Path, trained_checkpoint: Path
) -> None:
    import os
    import signal
    import subprocess
    import sys
    import time

    many = tmp_path / "many"
    many.mkdir()
    for i in range(300):  # long enough to be interrupted midway
        write_rgb(many / f"m{i:03d}.png", 256, 256, seed=i)
    out = tmp_path / "out"
    repo = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(repo / "src"), str(repo)])}
    argv = ["predict", "--checkpoint", str(trained_checkpoint), "--images", str(many)]
    argv += ["--output", str(out), "--device", "cpu", "--batch-size", "1", "--save-overlay"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "skinet.cli.main", *argv],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    deadline = time.monotonic() + 120
    while not (out / "m000_overlay.png").exists():
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[0][-3000:]
        time.sleep(0.02)
    proc.send_signal(signal.SIGINT)
    said = " ".join(proc.communicate(timeout=60)[0].split())  # rich wraps the log lines
    assert proc.returncode == 130, said[-3000:]
    assert "interrupted (Ctrl-C): partial masks are left in" in said, said[-3000:]
    assert 'predictions.json marked incomplete ("complete": false)' in said, said[-3000:]
    assert "Traceback" not in said
    record = json.loads((out / PREDICTIONS_FILE).read_text())
    assert record["complete"] is False and record["arguments"]["save_overlay"] is True
    assert len(list(out.glob("*_mask.png"))) < 300
    # The rerun takes the folder up again (it is SkiNet's) and leaves only its own files.
    few = tmp_path / "few"
    few.mkdir()
    write_rgb(few / "m000.png", 40, 40)
    done = json.loads(_run_and_read(trained_checkpoint, few, out).read_text())
    assert done["complete"] is True
    assert sorted(p.name for p in out.iterdir()) == ["m000_mask.png", PREDICTIONS_FILE]
