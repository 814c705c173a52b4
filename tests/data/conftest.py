"""Fixture trees for the data tests: small image/mask files written with cv2.imwrite."""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
import pytest
from data_trees import build_official, write_pair

from skinet.data.layouts import ISIC2017_FOLDERS, ISIC2018_FOLDERS


@pytest.fixture
def isic2017_tree(tmp_path: Path) -> Path:
    """ISIC 2017 layout, 6 train / 3 val / 3 test pairs, plus superpixels and metadata files."""
    root = build_official(
        tmp_path / "isic2017", ISIC2017_FOLDERS, {"train": 6, "val": 3, "test": 3}
    )
    train_dir = root / ISIC2017_FOLDERS["train"][0]
    cv2.imwrite(str(train_dir / "ISIC_0000000_superpixels.png"), np.zeros((40, 48, 3), np.uint8))
    (train_dir / "ISIC-2017_Training_Data_metadata.csv").write_text("image_id,age\n")
    return root


@pytest.fixture
def isic2018_tree(tmp_path: Path) -> Path:
    """ISIC 2018 Task 1 layout, 5 train / 2 val pairs (no test), PNG images."""
    root = build_official(tmp_path / "isic2018", ISIC2018_FOLDERS, {"train": 5, "val": 2}, ".png")
    (root / ISIC2018_FOLDERS["train"][0] / "LICENSE.txt").write_text("CC BY-NC")
    return root


@pytest.fixture
def ph2_tree(tmp_path: Path) -> Path:
    """PH2 layout with 10 cases of BMP images and lesion masks."""
    base = tmp_path / "PH2Dataset" / "PH2 Dataset images"
    for i in range(10):
        case = f"IMD{i:03d}"
        write_pair(
            base / case / f"{case}_Dermoscopic_Image" / f"{case}.bmp",
            base / case / f"{case}_lesion" / f"{case}_lesion.bmp",
            i,
        )
        (base / case / f"{case}_roi").mkdir()
    return tmp_path / "PH2Dataset"


@pytest.fixture
def folder_tree(tmp_path: Path) -> Path:
    """Generic images/ + masks/ layout, mask suffix ``_mask``, 10 pairs."""
    root = tmp_path / "folder"
    for i in range(10):
        write_pair(root / "images" / f"img{i:02d}.jpg", root / "masks" / f"img{i:02d}_mask.png", i)
    return root
