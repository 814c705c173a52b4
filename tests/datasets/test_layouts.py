"""Readers of each layout, split assignment and data-root resolution."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from skinet.config.data import DataConfig
from skinet.datasets.layouts import ISIC2017_FOLDERS, assign_splits
from skinet.datasets.locate import index_dataset, resolve_data_root, resolve_root
from skinet.datasets.registry import read_layout
from skinet.datasets.verify import verify_dataset
from skinet.imaging.errors import DatasetError


def _ids(samples) -> list[str]:
    return [s.id for s in samples]


def test_isic2017_reader_pairs_by_id_and_skips_extras(isic2017_tree: Path) -> None:
    index = read_layout(isic2017_tree, "isic2017")
    assert index.problems == []
    assert [len(index.splits[s]) for s in ("train", "val", "test")] == [6, 3, 3]
    for sample in index.splits["train"]:
        assert sample.mask_path.name == f"{sample.id}_segmentation.png"
        assert "superpixels" not in sample.image_path.name


def test_isic2018_reader_and_missing_test_carved(isic2018_tree: Path, caplog) -> None:
    index = read_layout(isic2018_tree, "isic2018")
    assert index.problems == [] and set(index.splits) == {"train", "val"}
    with caplog.at_level(logging.WARNING):
        splits = assign_splits(index, seed=1, val_fraction=0.2, test_fraction=0.4)
    assert "no official test split" in caplog.text
    assert len(splits["test"]) == 2 and len(splits["train"]) == 3 and len(splits["val"]) == 2
    assert not set(_ids(splits["test"])) & set(_ids(splits["train"]))
    again = assign_splits(index, seed=1, val_fraction=0.2, test_fraction=0.4)
    assert _ids(again["test"]) == _ids(splits["test"])


def test_test_fraction_zero_trains_on_every_pair_and_says_so(isic2018_tree: Path, caplog) -> None:
    data = DataConfig(dataset="isic2018", data_dir=str(isic2018_tree), test_fraction=0.0)
    with caplog.at_level(logging.INFO):
        index, splits = index_dataset(data)  # what training and `skinet data verify` call
    assert splits["test"] == [] and _ids(splits["train"]) == _ids(index.splits["train"])
    assert "; carved" not in caplog.text
    assert "test_fraction is 0: none is carved, all 5 remaining training pairs train" in caplog.text


def test_ph2_reader(ph2_tree: Path) -> None:
    index = read_layout(ph2_tree, "ph2")
    assert index.problems == [] and not index.official_split
    samples = index.splits["all"]
    assert _ids(samples) == [f"IMD{i:03d}" for i in range(10)]
    assert samples[0].mask_path.name == "IMD000_lesion.bmp"
    # the inner "PH2 Dataset images" folder works as root too
    assert len(read_layout(ph2_tree / "PH2 Dataset images", "ph2").splits["all"]) == 10


def test_folder_reader_with_mask_suffix(folder_tree: Path) -> None:
    index = read_layout(folder_tree, "folder", mask_suffix="_mask")
    assert index.problems == [] and len(index.splits["all"]) == 10
    wrong = read_layout(folder_tree, "folder", mask_suffix="_segmentation")
    assert len(wrong.problems) == 20  # every image lacks a mask, every mask lacks an image


@pytest.mark.parametrize("seed", [0, 5])
def test_split_without_official_split_is_deterministic_and_disjoint(folder_tree, seed) -> None:
    index = read_layout(folder_tree, "folder", mask_suffix="_mask")
    a = assign_splits(index, seed, val_fraction=0.2, test_fraction=0.3)
    b = assign_splits(index, seed, val_fraction=0.2, test_fraction=0.3)
    assert {k: _ids(v) for k, v in a.items()} == {k: _ids(v) for k, v in b.items()}
    assert [len(a[s]) for s in ("train", "val", "test")] == [5, 2, 3]
    all_ids = _ids(a["train"]) + _ids(a["val"]) + _ids(a["test"])
    assert sorted(all_ids) == sorted(_ids(index.splits["all"]))
    other = assign_splits(index, seed + 1, val_fraction=0.2, test_fraction=0.3)
    assert _ids(other["test"]) != _ids(a["test"])


def test_missing_mask_and_orphan_mask_reported(isic2017_tree: Path) -> None:
    image_dir, mask_dir = (isic2017_tree / n for n in ISIC2017_FOLDERS["train"])
    (mask_dir / "ISIC_0000001_segmentation.png").unlink()
    (image_dir / "ISIC_0000002.jpg").unlink()
    problems = verify_dataset(isic2017_tree, "isic2017", decode=False)
    messages = {p.path.name: p.message for p in problems}
    assert messages["ISIC_0000001.jpg"].startswith("missing mask")
    assert messages["ISIC_0000002_segmentation.png"] == "mask without an image"
    assert all(p.split == "train" for p in problems)


def test_data_root_search_order(tmp_path: Path, monkeypatch) -> None:
    mount, local, cwd = tmp_path / "mnt", tmp_path / "local", tmp_path / "cwd"
    for base in (local, cwd):
        (base / "ds").mkdir(parents=True)
    monkeypatch.chdir(cwd)
    assert resolve_data_root("ds", str(mount), str(local)) == local / "ds"
    (mount / "ds").mkdir(parents=True)
    assert resolve_data_root("ds", str(mount), str(local)) == mount / "ds"
    assert resolve_data_root("ds") == cwd / "ds"
    assert resolve_data_root(str(local / "ds"), str(mount)) == local / "ds"


def test_missing_data_root_lists_every_candidate(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    cfg = DataConfig(
        dataset="isic2017", data_dir="nope", azure_blob_mount_point="/mnt/x", local_data_root="/l"
    )
    with pytest.raises(DatasetError) as info:
        index_dataset(cfg)
    message = str(info.value)
    for path in ("/mnt/x/nope", "/l/nope", str(tmp_path / "nope")):
        assert path in message
    assert "set DATA_CONFIG.azure_blob_mount_point / DATA_CONFIG.local_data_root" in message


def test_a_missing_absolute_data_dir_is_named_without_the_search_roots(tmp_path: Path) -> None:
    """An absolute data_dir is not looked for under other roots: the message says so."""
    with pytest.raises(DatasetError) as info:
        index_dataset(DataConfig(dataset="isic2017", data_dir=str(tmp_path / "nope")))
    message = str(info.value)
    assert message.endswith("No such folder: check the path (--data-dir, or DATA_CONFIG.data_dir).")
    assert "local_data_root" not in message


def test_synthetic_generated_when_absent(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    cfg = DataConfig(
        dataset="synthetic",
        data_dir="gen",
        local_data_root=str(tmp_path / "local"),
        synthetic_num_train=2,
        synthetic_num_val=1,
        synthetic_num_test=1,
        synthetic_image_size=32,
    )
    root = resolve_root(cfg)
    assert root == tmp_path / "local" / "gen"
    assert len(list((root / ISIC2017_FOLDERS["train"][0]).iterdir())) == 2


def test_synthetic_made_again_when_its_settings_change(tmp_path: Path, caplog) -> None:
    settings = dict(dataset="synthetic", data_dir=str(tmp_path / "gen"), synthetic_num_val=1)
    settings.update(synthetic_num_test=1, synthetic_image_size=32)
    root = resolve_root(DataConfig(**settings, synthetic_num_train=2))
    train_images = root / ISIC2017_FOLDERS["train"][0]
    assert len(list(train_images.iterdir())) == 2
    caplog.set_level("INFO")
    assert resolve_root(DataConfig(**settings, synthetic_num_train=3)) == root
    assert len(list(train_images.iterdir())) == 3  # not the 2 of the first settings
    assert "made again with other settings: num_train 2 -> 3" in caplog.text


def test_a_dataset_without_its_training_folder_names_that_folder(
    synthetic_root: Path, tmp_path: Path
) -> None:
    import shutil

    root = tmp_path / "isic"
    shutil.copytree(synthetic_root, root)
    shutil.rmtree(root / ISIC2017_FOLDERS["train"][0])
    problems = verify_dataset(DataConfig(dataset="isic2017", data_dir=str(root)), decode=False)
    message = " ".join(str(problem) for problem in problems)
    assert f"no training images found: {root / ISIC2017_FOLDERS['train'][0]} is missing" in message
    assert ISIC2017_FOLDERS["val"][0] not in message  # the folders that are there go unnamed


def test_images_in_subfolders_are_named_as_not_searched(tmp_path: Path) -> None:
    import cv2
    import numpy as np

    for patient in ("p0", "p1"):
        for kind, suffix in (("images", ""), ("masks", "_segmentation")):
            folder = tmp_path / "clinic" / kind / patient
            folder.mkdir(parents=True)
            pixels = np.zeros((16, 16, 3 if kind == "images" else 1), np.uint8)
            assert cv2.imwrite(str(folder / f"{patient}_img{suffix}.png"), pixels)
    problems = verify_dataset(tmp_path / "clinic", "folder", decode=False)
    said = " ".join(str(problem) for problem in problems)
    assert "2 image(s) sit in its subfolders (e.g. p0/p0_img.png), which are not searched" in said
