"""Checkpoints written whole: on a full disk the old file stays and nothing partial is left."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest
import torch
from tests.helpers.small_disk import small_disk

from skinet.training.checkpoint_io import WholeFileCheckpointIO
from skinet.training.guards import disk_full_error


@pytest.mark.process
def test_a_checkpoint_that_does_not_fit_leaves_the_old_one_whole_and_names_itself(
    tmp_path: Path,
) -> None:
    io = WholeFileCheckpointIO()
    with small_disk(tmp_path / "disk", "3m") as disk:
        last = disk / "checkpoints" / "last.ckpt"
        io.save_checkpoint({"weights": torch.zeros(300_000), "epoch": 0}, last)  # 1.2 MB
        with pytest.raises(OSError) as info:
            io.save_checkpoint({"weights": torch.ones(600_000), "epoch": 1}, last)  # 2.4 MB
        assert info.value.errno == errno.ENOSPC and info.value.filename == str(last)
        assert [p.name for p in last.parent.iterdir()] == ["last.ckpt"]
        assert torch.load(last, weights_only=True)["epoch"] == 0


def test_the_disk_full_message_says_failed_only_when_the_run_is() -> None:
    error = OSError(errno.ENOSPC, "No space left on device", "/full/run/checkpoints/a.ckpt")
    run_dir = Path("/full/run")
    for marked, says in (
        (True, "its MLflow run is marked FAILED"),
        (False, "shows RUNNING until the resume takes it over"),
        (None, "(or start it again if it saved no checkpoint yet)"),
    ):
        message = str(disk_full_error(error, run_dir, marked))
        assert message.startswith("the disk is full: writing /full/run/checkpoints/a.ckpt")
        assert message.endswith(says), message
