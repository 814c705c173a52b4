"""Split selection: evaluation's pairs of a split are training's, by one function."""

from __future__ import annotations

from pathlib import Path

import pytest

from skinet.config.data import DataConfig
from skinet.datasets.locate import index_dataset, select_samples
from skinet.datasets.splits import write_split_file
from skinet.imaging.errors import DatasetError


def _ids(samples) -> list[str]:
    return [s.id for s in samples]


@pytest.mark.parametrize("with_split_file", [False, True])
def test_evaluation_selects_the_pairs_training_assigned(
    folder_tree: Path, tmp_path: Path, with_split_file: bool
) -> None:
    fields: dict[str, object] = {"val_fraction": 0.2, "test_fraction": 0.3}
    if with_split_file:
        wanted = {"train": [f"img{i:02d}" for i in range(7)], "val": ["img07"]}
        wanted["test"] = ["img08", "img09"]
        fields["split_file"] = str(write_split_file(wanted, tmp_path / "split.csv"))
    data = DataConfig(dataset="folder", data_dir=str(folder_tree), mask_suffix="_mask", **fields)
    _, trained = index_dataset(data)
    for split in ("train", "val", "test"):
        assert _ids(select_samples(data, split=split)) == _ids(trained[split])
    assert sorted(_ids(select_samples(data, split="all"))) == [f"img{i:02d}" for i in range(10)]
    # Another folder is split by its layout alone, never by this run's split file.
    carved = DataConfig(**{**data.model_dump(), "split_file": None})
    other = select_samples(data, data_dir=folder_tree, dataset="folder", split="test")
    assert _ids(other) == _ids(index_dataset(carved)[1]["test"])


def test_unknown_or_empty_split_is_refused(folder_tree: Path) -> None:
    data = DataConfig(dataset="folder", data_dir=str(folder_tree), mask_suffix="_mask")
    with pytest.raises(ValueError, match="split must be one of train, val, test or all"):
        select_samples(data, split="holdout")
    empty = DataConfig(**{**data.model_dump(), "test_fraction": 0.0})
    with pytest.raises(DatasetError, match="no image/mask pairs in split 'test'"):
        select_samples(empty, split="test")
