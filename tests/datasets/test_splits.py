"""Split files (``DATA_CONFIG.split_file``), the mask-suffix hint and EXIF-oriented images."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest

from skinet.config.data import DataConfig
from skinet.datasets.locate import index_dataset
from skinet.datasets.registry import read_layout
from skinet.datasets.splits import read_split_file, write_split_file
from skinet.imaging.decode import read_image, read_mask
from skinet.imaging.errors import DatasetError


def _folder_config(root: Path, **fields: object) -> DataConfig:
    return DataConfig(dataset="folder", data_dir=str(root), mask_suffix="_mask", **fields)


def _ids(samples) -> list[str]:
    return [s.id for s in samples]


def test_split_file_fixes_every_split(folder_tree: Path, tmp_path: Path) -> None:
    wanted = {
        "train": [f"img{i:02d}" for i in (0, 2, 4, 6, 8, 9)],
        "val": ["img01", "img03"],
        "test": ["img05", "img07"],
    }
    split_file = write_split_file(wanted, tmp_path / "my_split.csv")
    _, splits = index_dataset(_folder_config(folder_tree, split_file=str(split_file)))
    assert {name: _ids(pairs) for name, pairs in splits.items()} == wanted
    # the carved split differs, so the file was honoured rather than matched by chance
    _, carved = index_dataset(_folder_config(folder_tree))
    assert _ids(carved["test"]) != wanted["test"]


def test_split_file_names_missing_and_unknown_ids(folder_tree: Path, tmp_path: Path) -> None:
    rows = [f"img{i:02d},train" for i in range(9)] + ["ghost01,val", "ghost02,test"]
    split_file = tmp_path / "split.csv"
    split_file.write_text("id,split\n" + "\n".join(rows) + "\n")
    with pytest.raises(DatasetError) as error:
        index_dataset(_folder_config(folder_tree, split_file=str(split_file)))
    text = str(error.value)
    assert "1 image(s)" in text and "img09" in text and "not in the split file" in text
    assert "2 id(s)" in text and "ghost01, ghost02" in text and "no image/mask pair" in text


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("image,fold\na,train\n", "header 'id,split'"),
        ("id,split\na,training\n", r"split\.csv:2: split 'training' of 'a' is not one of"),
        ("id,split\na,train\na,val\n", r"split\.csv:3: id 'a' is listed twice"),
        ("id,split\na\n", "expected 2 columns"),
    ],
)
def test_bad_split_file_is_a_clear_error(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "split.csv"
    path.write_text(content)
    with pytest.raises(DatasetError, match=message):
        read_split_file(path)
    with pytest.raises(DatasetError, match="split_file not found"):
        read_split_file(tmp_path / "absent.csv")


def test_pairing_error_suggests_the_mask_suffix(folder_tree: Path) -> None:
    index = read_layout(folder_tree, "folder", mask_suffix="_segmentation")
    messages = {p.path.name: p.message for p in index.problems}
    assert messages["img00.jpg"].endswith(
        "found img00_mask.png: set DATA_CONFIG.mask_suffix: _mask"
    )


def _exif_rotated(array: np.ndarray, path: Path) -> Path:
    """Write ``array`` stored sideways with EXIF orientation 6 (display rotated 90 deg CW)."""
    from PIL import Image

    stored = np.ascontiguousarray(np.rot90(array, k=1))  # what a camera held sideways stores
    image = Image.fromarray(stored)
    exif = image.getexif()
    exif[0x0112] = 6
    buffer = io.BytesIO()
    image.save(buffer, "JPEG" if path.suffix == ".jpg" else "PNG", exif=exif.tobytes(), quality=95)
    path.write_bytes(buffer.getvalue())
    return path


def test_exif_orientation_is_applied_to_image_and_mask(tmp_path: Path) -> None:
    upright = np.zeros((24, 40, 3), np.uint8)
    upright[:, :10] = (250, 20, 20)  # a red band on the left of the upright picture
    mask = np.zeros((24, 40), np.uint8)
    mask[:, :10] = 255
    image = read_image(_exif_rotated(upright, tmp_path / "x.jpg"))
    decoded_mask = read_mask(_exif_rotated(mask, tmp_path / "x_mask.png"))
    assert image.shape == (24, 40, 3) and decoded_mask.shape == (24, 40)
    assert image[:, :8, 0].mean() > 200 and image[:, 12:, 0].mean() < 40
    assert decoded_mask[:, :10].all() and not decoded_mask[:, 10:].any()
