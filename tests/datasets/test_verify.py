"""Bad and unusual inputs: each converted correctly or reported with its path and problem."""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
import pytest
from tests.helpers.data_trees import make_image, make_mask

from skinet.config.experiment import parse_config
from skinet.datasets.layouts import ISIC2017_FOLDERS
from skinet.datasets.verify import verify_dataset
from skinet.imaging.decode import DecodeError, load_pair, read_image, read_mask
from skinet.imaging.errors import DatasetError
from skinet.training.data.loaders import build_dataloaders


def _write(path: Path, array: np.ndarray, params: list[int] | None = None) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    assert cv2.imwrite(str(path), array, params or [])
    return path


def test_grayscale_rgba_and_16bit_images_become_rgb(tmp_path: Path) -> None:
    bgr = make_image()
    gray = _write(tmp_path / "g.png", cv2.cvtColor(bgr, cv2.COLOR_BGR2GRAY))
    rgba = _write(tmp_path / "a.png", cv2.cvtColor(bgr, cv2.COLOR_BGR2BGRA))
    deep = _write(tmp_path / "d.png", bgr.astype(np.uint16) * 257)
    # The same pixels in a 16-bit file without scaling, and as 12-bit sensor data.
    eight_in_16 = _write(tmp_path / "e.png", bgr.astype(np.uint16))
    twelve_in_16 = _write(tmp_path / "t.png", bgr.astype(np.uint16) << 4)
    expected_rgb = cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB)
    out = read_image(gray)
    assert out.shape == (40, 48, 3) and out.dtype == np.uint8
    assert np.array_equal(out[..., 0], out[..., 2])
    assert np.array_equal(read_image(rgba), expected_rgb)
    assert np.array_equal(read_image(deep), expected_rgb)
    assert np.array_equal(read_image(eight_in_16), expected_rgb)
    assert np.array_equal(read_image(twelve_in_16), expected_rgb)


@pytest.mark.parametrize(
    "kind",
    ["0_255", "0_1", "antialiased", "rgb", "16bit", "0_255_in_16bit", "palette_like_rgb_red"],
)
def test_masks_are_binarised(tmp_path: Path, kind: str) -> None:
    base = make_mask()
    if kind == "0_255":
        array = base
    elif kind == "0_1":
        array = base // 255
    elif kind == "antialiased":
        array = cv2.GaussianBlur(base, (5, 5), 1.5)
    elif kind == "rgb":
        array = np.repeat(base[..., None], 3, axis=2)
    elif kind == "16bit":
        array = base.astype(np.uint16) * 257
    elif kind == "0_255_in_16bit":  # 0/255 values saved in a 16-bit file
        array = base.astype(np.uint16)
    else:  # a palette mask decodes to colour: lesion in red (BGR) on black
        array = np.zeros((*base.shape, 3), np.uint8)
        array[..., 2] = base // 255 * 200
    mask = read_mask(_write(tmp_path / "m.png", array))
    assert mask.dtype == np.uint8 and set(np.unique(mask).tolist()) == {0, 1}
    assert abs(int(mask.sum()) - int((base > 0).sum())) <= base.shape[1] // 2


def test_ambiguous_mask_values_are_an_error(tmp_path: Path) -> None:
    labels = (make_mask() // 255) * 3
    with pytest.raises(DecodeError, match="not binary"):
        read_mask(_write(tmp_path / "m.png", labels))


def test_truncated_and_corrupt_files_are_reported(tmp_path: Path) -> None:
    jpg = _write(tmp_path / "i.jpg", make_image())
    jpg.write_bytes(jpg.read_bytes()[: len(jpg.read_bytes()) // 2])
    png = _write(tmp_path / "m.png", make_mask())
    png.write_bytes(png.read_bytes()[:-30])
    junk = tmp_path / "junk.png"
    junk.write_bytes(b"\x89PNG not really" + b"IEND")
    problems = load_pair(jpg, png, 32)
    assert isinstance(problems, list)
    assert {p.path for p in problems} == {jpg, png}
    assert "truncated" in problems[0].message and "truncated" in problems[1].message
    with pytest.raises(DecodeError, match="cannot decode"):
        read_image(junk)


def test_size_mismatch_reported(tmp_path: Path) -> None:
    image = _write(tmp_path / "i.jpg", make_image(40, 48))
    mask = _write(tmp_path / "m.png", make_mask(40, 40))
    problems = load_pair(image, mask, 32)
    assert isinstance(problems, list) and len(problems) == 1
    assert "does not match image size 48x40" in problems[0].message


def test_any_aspect_ratio_resized_once(tmp_path: Path) -> None:
    image = _write(tmp_path / "i.jpg", make_image(30, 90))
    mask = _write(tmp_path / "m.png", make_mask(30, 90))
    result = load_pair(image, mask, 32)
    assert not isinstance(result, list)
    rgb, binary = result
    assert rgb.shape == (32, 32, 3) and binary.shape == (32, 32)
    assert set(np.unique(binary).tolist()) == {0, 1}


def test_every_problem_listed_and_build_refuses(isic2017_tree: Path, tiny_raw) -> None:
    train_images, train_masks = (isic2017_tree / n for n in ISIC2017_FOLDERS["train"])
    val_images, val_masks = (isic2017_tree / n for n in ISIC2017_FOLDERS["val"])
    (train_images / "ISIC_0000000.jpg").write_bytes(b"\xff\xd8 not a jpeg \xff\xd9")
    _write(train_masks / "ISIC_0000001_segmentation.png", make_mask(20, 20))
    _write(val_masks / "ISIC_0000006_segmentation.png", (make_mask() // 255) * 5)
    (val_masks / "ISIC_0000007_segmentation.png").unlink()
    expected = {
        "ISIC_0000000.jpg",
        "ISIC_0000001_segmentation.png",
        "ISIC_0000006_segmentation.png",
        "ISIC_0000007.jpg",
    }
    problems = verify_dataset(isic2017_tree, "isic2017")
    assert {p.path.name for p in problems} == expected

    tiny_raw["DATA_CONFIG"]["data_dir"] = str(isic2017_tree)
    with pytest.raises(DatasetError) as info:
        build_dataloaders(parse_config(tiny_raw))
    # pairing and decode problems are reported together, as `skinet data verify` lists them
    assert {p.path.name for p in info.value.problems} == expected
    (val_masks / "ISIC_0000007_segmentation.png").write_bytes(
        (val_masks / "ISIC_0000008_segmentation.png").read_bytes()
    )
    with pytest.raises(DatasetError) as info:
        build_dataloaders(parse_config(tiny_raw))
    names = {p.path.name for p in info.value.problems}
    assert names == expected - {"ISIC_0000007.jpg"}
    for name in names:
        assert name in str(info.value)
