"""The synthetic ISIC 2017-style generator."""

from __future__ import annotations

import hashlib
from pathlib import Path

import cv2
import numpy as np

from skinet.datasets.layouts import ISIC2017_FOLDERS
from skinet.datasets.synthetic import COMPLETE_MARKER, is_complete, make_synthetic_dataset


def _digest(root: Path) -> str:
    h = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        if path.is_file() and not path.name.startswith("."):
            h.update(str(path.relative_to(root)).encode())
            h.update(path.read_bytes())
    return h.hexdigest()


def test_official_layout_and_binary_masks(synthetic_root: Path) -> None:
    counts = {"train": 8, "val": 4, "test": 4}
    ids = []
    for split, (image_name, mask_name) in ISIC2017_FOLDERS.items():
        images = sorted((synthetic_root / image_name).glob("ISIC_*.jpg"))
        assert len(images) == counts[split]
        for image_path in images:
            assert len(image_path.stem) == len("ISIC_0000000")
            mask = cv2.imread(
                str(synthetic_root / mask_name / f"{image_path.stem}_segmentation.png"),
                cv2.IMREAD_UNCHANGED,
            )
            image = cv2.imread(str(image_path))
            assert image.shape == (64, 64, 3) and mask.shape == (64, 64)
            assert set(np.unique(mask).tolist()) == {0, 255}
            # the lesion is darker than the skin around it
            assert image[mask > 0].mean() < image[mask == 0].mean() - 20
            ids.append(image_path.stem)
    assert len(set(ids)) == len(ids)
    assert is_complete(synthetic_root)


def test_deterministic_by_seed(tmp_path: Path) -> None:
    a = make_synthetic_dataset(tmp_path / "a", 3, 1, 1, 48, seed=7)
    b = make_synthetic_dataset(tmp_path / "b", 3, 1, 1, 48, seed=7)
    c = make_synthetic_dataset(tmp_path / "c", 3, 1, 1, 48, seed=8)
    assert _digest(a) == _digest(b)
    assert _digest(a) != _digest(c)


def test_lesions_vary_in_size_and_position(tmp_path: Path) -> None:
    root = make_synthetic_dataset(tmp_path / "s", 12, 1, 1, 64, seed=3)
    masks = [
        cv2.imread(str(p), cv2.IMREAD_GRAYSCALE) > 0
        for p in sorted((root / ISIC2017_FOLDERS["train"][1]).iterdir())
    ]
    areas = np.array([m.mean() for m in masks])
    centres = np.array([np.argwhere(m).mean(axis=0) for m in masks])
    assert areas.min() > 0.02 and areas.max() < 0.6
    assert areas.std() > 0.02
    assert centres.std(axis=0).min() > 1.5


def test_incomplete_folder_is_regenerated(tmp_path: Path) -> None:
    root = make_synthetic_dataset(tmp_path / "s", 2, 1, 1, 32, seed=0)
    first = _digest(root)
    (root / COMPLETE_MARKER).unlink()
    victim = next((root / ISIC2017_FOLDERS["train"][0]).iterdir())
    victim.write_bytes(b"half")
    assert not is_complete(root)
    make_synthetic_dataset(root, 2, 1, 1, 32, seed=0)
    assert is_complete(root)
    assert _digest(root) == first
    assert not list(root.glob(".synthetic-tmp-*"))
