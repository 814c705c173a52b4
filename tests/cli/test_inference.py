"""``skinet predict``: outputs per image, a corrupt file reported, exit codes."""

from __future__ import annotations

import json
from pathlib import Path

import cv2
import numpy as np
from tests.helpers.inference import run_cli, write_rgb

from skinet.inference.postprocess import fill_holes, keep_largest_component

SIZES = {"wide": (50, 70), "square": (64, 64), "odd": (33, 97)}


def _input_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "in"
    folder.mkdir()
    for i, (name, (height, width)) in enumerate(SIZES.items()):
        write_rgb(folder / f"{name}.png", height, width, seed=i)
    return folder


def test_predict_folder_writes_masks_at_original_size(
    trained_checkpoint: Path, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    argv = [
        "predict",
        "--checkpoint",
        str(trained_checkpoint),
        "--images",
        str(_input_dir(tmp_path)),
    ]
    argv += ["--output", str(out), "--save-proba", "--save-overlay", "--batch-size", "2"]
    assert run_cli([*argv, "--device", "cpu", "--keep-largest", "--fill-holes"]) == 0
    for name, (height, width) in SIZES.items():
        mask = cv2.imread(str(out / f"{name}_mask.png"), cv2.IMREAD_UNCHANGED)
        assert mask.shape == (height, width) and set(np.unique(mask)) <= {0, 255}
        proba = cv2.imread(str(out / f"{name}_proba.png"), cv2.IMREAD_UNCHANGED)
        assert proba.shape == (height, width) and proba.dtype == np.uint8
        overlay = cv2.imread(str(out / f"{name}_overlay.png"))
        assert overlay.shape == (height, width, 3)


def test_corrupt_file_is_reported_and_the_rest_written(
    trained_checkpoint: Path, tmp_path: Path, caplog
) -> None:
    folder = _input_dir(tmp_path)
    (folder / "broken.jpg").write_bytes(b"\xff\xd8\xff\xe0 definitely not a jpeg")
    out = tmp_path / "out"
    argv = ["predict", "--checkpoint", str(trained_checkpoint), "--images", str(folder)]
    code = run_cli([*argv, "--output", str(out), "--save-proba", "npy", "--device", "cpu"])
    assert code == 1
    assert sorted(p.name for p in out.glob("*_mask.png")) == [
        f"{n}_mask.png" for n in sorted(SIZES)
    ]
    assert not (out / "broken_mask.png").exists()
    assert np.load(out / "odd_proba.npy").shape == SIZES["odd"]
    assert "broken.jpg" in caplog.text and "1 of 4 images failed" in caplog.text
    # The run went through every image: complete, with the one it could not read listed.
    record = json.loads((out / "predictions.json").read_text())
    assert record["complete"] is True and list(record["failures"]) == ["broken.jpg"]


def test_single_file_and_missing_input(trained_checkpoint: Path, tmp_path: Path) -> None:
    image = tmp_path / "one.jpg"
    write_rgb(image, 40, 30)
    out = tmp_path / "out"
    base = ["predict", "--checkpoint", str(trained_checkpoint), "--output", str(out)]
    assert run_cli([*base, "--images", str(image), "--threshold", "0.3"]) == 0
    assert cv2.imread(str(out / "one_mask.png"), cv2.IMREAD_UNCHANGED).shape == (40, 30)
    assert run_cli([*base, "--images", str(tmp_path / "nothing")]) == 2


def test_malicious_checkpoint_fails_the_command(tmp_path: Path) -> None:
    import torch
    from tests.checkpoints.test_read import _Exploit

    marker, path = tmp_path / "pwned", tmp_path / "evil.ckpt"
    torch.save({"skinet": _Exploit(marker)}, path)
    image = tmp_path / "x.png"
    write_rgb(image, 32, 32)
    argv = [
        "predict",
        "--checkpoint",
        str(path),
        "--images",
        str(image),
        "--output",
        str(tmp_path / "out"),
    ]
    assert run_cli(argv) == 1
    assert not marker.exists()


def test_inputs_that_would_write_one_mask_are_refused_before_anything_is_written(
    trained_checkpoint: Path, tmp_path: Path, caplog
) -> None:
    folder = tmp_path / "in"
    folder.mkdir()
    write_rgb(folder / "a.jpg", 40, 40, seed=0)
    write_rgb(folder / "a.png", 40, 40, seed=1)
    write_rgb(folder / "b.png", 40, 40, seed=2)
    out = tmp_path / "out"
    argv = ["predict", "--checkpoint", str(trained_checkpoint), "--images", str(folder)]
    assert run_cli([*argv, "--output", str(out)]) == 2
    assert f"{folder / 'a.jpg'} and {folder / 'a.png'} would both write a_mask.png" in caplog.text
    assert not out.exists()


def test_a_file_that_is_not_an_image_is_refused_without_an_output_folder(
    trained_checkpoint: Path, tmp_path: Path, caplog
) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_text("not an image")
    out = tmp_path / "out"
    argv = ["predict", "--checkpoint", str(trained_checkpoint), "--images", str(notes)]
    assert run_cli([*argv, "--output", str(out)]) == 2
    assert f"{notes} is not an image" in caplog.text
    assert not out.exists()


def test_keep_largest_and_fill_holes_change_the_masks_predict_writes(
    trained_checkpoint: Path, tmp_path: Path
) -> None:
    folder = tmp_path / "noise"
    folder.mkdir()
    for seed in range(3):  # noise: the masks break into many pieces with holes
        write_rgb(folder / f"noise{seed}.png", 96, 96, seed=seed)
    base = ["predict", "--checkpoint", str(trained_checkpoint), "--images", str(folder)]
    base += ["--device", "cpu", "--save-proba", "npy"]
    assert run_cli([*base, "--output", str(tmp_path / "first")]) == 0
    probs = {p.name[: -len("_proba.npy")]: np.load(p) for p in (tmp_path / "first").glob("*.npy")}
    threshold = round(float(np.median(np.concatenate([p.ravel() for p in probs.values()]))), 3)
    base += ["--threshold", str(threshold)]
    for name, flags, step in [
        ("largest", ["--keep-largest"], keep_largest_component),
        ("filled", ["--fill-holes"], fill_holes),
    ]:
        out = tmp_path / name
        assert run_cli([*base, "--output", str(out), *flags]) == 0
        changed = 0
        for stem, proba in probs.items():
            plain = (proba >= threshold).astype(np.uint8)
            mask = cv2.imread(str(out / f"{stem}_mask.png"), cv2.IMREAD_UNCHANGED) // 255
            np.testing.assert_array_equal(mask, step(plain), err_msg=f"{name}: {stem}")
            changed += int((mask != plain).any())
        assert changed, f"{name}: no mask needed it, so the test proves nothing"


def test_masks_kept_beside_their_images_are_not_predicted(
    trained_checkpoint: Path, tmp_path: Path, caplog
) -> None:
    folder = _input_dir(tmp_path)  # wide, square, odd
    for name in ("wide_mask.png", "square_segmentation.png", "odd_proba.png"):
        write_rgb(folder / name, 20, 20)
    write_rgb(folder / "alone_mask.png", 20, 20)  # no image 'alone': an image of its own
    out = tmp_path / "out"
    argv = ["predict", "--checkpoint", str(trained_checkpoint), "--images", str(folder)]
    assert run_cli([*argv, "--output", str(out), "--device", "cpu"]) == 0
    written = sorted(p.name for p in out.glob("*_mask.png"))
    assert written == ["alone_mask_mask.png", "odd_mask.png", "square_mask.png", "wide_mask.png"]
    assert "3 file(s) in" in caplog.text and "they are not taken as images" in caplog.text
