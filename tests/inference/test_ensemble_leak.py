"""The ensemble leak check compares the members' recorded splits image by image."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import pytest
import torch
from tests.helpers.inference import run_cli

from skinet.datasets.splits import SPLIT_FILE_NAME, read_split_file, write_split_file
from skinet.inference.ensemble import EnsemblePredictor, check_split_not_leaked


def member(trained: Path, run: Path, swap: bool = False, record: bool = True) -> Path:
    """``trained`` copied into the run folder ``run``, with the split its run recorded, or that
    split with one test image and one training image swapped (another carve of the same data);
    ``record=False`` leaves no ``splits.csv``."""
    target = run / "checkpoints" / "best.ckpt"
    target.parent.mkdir(parents=True)
    shutil.copyfile(trained, target)
    assignment = read_split_file(trained.parent.parent / SPLIT_FILE_NAME)
    if swap:
        test = min(i for i, s in assignment.items() if s == "test")
        train = min(i for i, s in assignment.items() if s == "train")
        assignment[test], assignment[train] = "train", "test"
    splits: dict[str, list[str]] = {}
    for sample_id, split in assignment.items():
        splits.setdefault(split, []).append(sample_id)
    if record:
        write_split_file(splits, run / SPLIT_FILE_NAME)
    return target


def test_members_carved_otherwise_leak_the_test_split(
    trained_checkpoint: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    first = member(trained_checkpoint, tmp_path / "a")
    same = member(trained_checkpoint, tmp_path / "b")
    other = member(trained_checkpoint, tmp_path / "c", swap=True)
    shared = EnsemblePredictor.from_checkpoints([first, same], device="cpu")
    for split in ("train", "val", "test", "all"):
        check_split_not_leaked(shared, split, allow_leak=False)  # one split: nothing leaks

    leaky = EnsemblePredictor.from_checkpoints([first, other], device="cpu")
    with pytest.raises(ValueError, match=r"--split test .*1 of its 'test' images .* member "):
        check_split_not_leaked(leaky, "test", allow_leak=False)
    check_split_not_leaked(leaky, "test", allow_leak=True)
    with pytest.raises(ValueError, match="--split all"):
        check_split_not_leaked(leaky, "all", allow_leak=False)

    # skinet evaluate refuses it with a usage error (exit 2), before scoring anything.
    output = tmp_path / "eval"
    with caplog.at_level(logging.ERROR):
        argv = ["evaluate", "--checkpoint", str(first), str(other), "--output", str(output)]
        assert run_cli([*argv, "--split", "test"]) == 2
    assert "training or validation images of member" in caplog.text
    assert not (output / "summary.json").exists()
    # --allow-leak scores it, and says why its scores are optimistic.
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        assert run_cli([*argv, "--split", "test", "--allow-leak", "--gallery", "0"]) == 0
    assert "--allow-leak: the scores of split 'test' are optimistic" in caplog.text
    assert (output / "summary.json").is_file()


def test_members_without_a_recorded_split_are_compared_by_their_split_settings(
    trained_checkpoint: Path, tmp_path: Path
) -> None:
    first = member(trained_checkpoint, tmp_path / "a", record=False)
    reseeded = member(trained_checkpoint, tmp_path / "b", record=False)
    checkpoint = torch.load(reseeded, map_location="cpu", weights_only=True)
    checkpoint["skinet"]["config"]["DATA_CONFIG"]["split_random_seed"] = 7
    torch.save(checkpoint, reseeded)
    check_split_not_leaked(
        EnsemblePredictor.from_checkpoints([first, first], device="cpu"), "test", False
    )
    leaky = EnsemblePredictor.from_checkpoints([first, reseeded], device="cpu")
    with pytest.raises(ValueError, match="split otherwise .*split_random_seed.*no splits.csv"):
        check_split_not_leaked(leaky, "test", allow_leak=False)
