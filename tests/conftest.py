"""Shared fixtures: a tiny CPU config, a small synthetic dataset, layout trees and one trained
checkpoint on disk."""

from __future__ import annotations

import multiprocessing.process
import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import pytest
from tests.helpers.config import tiny_raw_config
from tests.helpers.data_trees import build_official, write_pair

from skinet.config.experiment import ExperimentConfig, parse_config
from skinet.datasets.layouts import ISIC2017_FOLDERS, ISIC2018_FOLDERS

os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
# The tests that press Ctrl-C send a command SIGINT. A shell starts a background job with SIGINT
# ignored, and the commands it starts inherit that and would not stop; with Python's own handler
# here, a started command gets the default, as from a terminal.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


PROCESS_MARKER = "process"
"""One rule for the tests that start a process (a subprocess, a DDP rank, a server, DataLoader
workers): they carry ``@pytest.mark.process`` (``heavy`` tests always do), so
``-m "not process and not slow and not gpu and not heavy"`` is the in-process default
suite. :func:`_processes_are_marked` enforces it."""


PROBES = ("git", "uname")
"""Commands libraries run to describe the machine or the source tree: not the test's processes."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.get_closest_marker("heavy") is not None:
            item.add_marker(PROCESS_MARKER)


@pytest.fixture(autouse=True)
def _processes_are_marked(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> Iterator[None]:
    """Fail a test that starts a process without the ``process`` marker (``git`` and ``uname``,
    which MLflow and ``platform`` ask about the machine, do not count)."""
    if request.node.get_closest_marker(PROCESS_MARKER) is not None:
        yield
        return
    started: list[str] = []
    popen_init = subprocess.Popen.__init__
    process_start = multiprocessing.process.BaseProcess.start

    def popen(self: subprocess.Popen, args: Any, *rest: Any, **kwargs: Any) -> None:
        argv = [args] if isinstance(args, str | os.PathLike) else list(args)
        if Path(str(argv[0]).split()[0]).name not in PROBES:
            started.append(" ".join(map(str, argv))[:120])
        popen_init(self, args, *rest, **kwargs)

    def start(self: multiprocessing.process.BaseProcess) -> None:
        started.append(f"multiprocessing {self.name}")
        process_start(self)

    monkeypatch.setattr(subprocess.Popen, "__init__", popen)
    monkeypatch.setattr(multiprocessing.process.BaseProcess, "start", start)
    yield
    if started:
        pytest.fail(
            f"{request.node.nodeid} starts a process ({started[0]}) without the "
            f"'{PROCESS_MARKER}' marker: add @pytest.mark.{PROCESS_MARKER}",
            pytrace=False,
        )


@pytest.fixture(autouse=True)
def _restore_deterministic_mode() -> Iterator[None]:
    """A Trainer with ``deterministic=True`` switches torch's global mode on; switch it back."""
    import torch

    enabled = torch.are_deterministic_algorithms_enabled()
    warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
    yield
    torch.use_deterministic_algorithms(enabled, warn_only=warn_only)


@pytest.fixture(scope="session", autouse=True)
def _private_disk_cache(tmp_path_factory: pytest.TempPathFactory):
    """Point the persistent preprocessed cache at a session folder (never the user's cache)."""
    previous = os.environ.get("SKINET_CACHE_DIR")
    os.environ["SKINET_CACHE_DIR"] = str(tmp_path_factory.mktemp("skinet_cache"))
    yield
    if previous is None:
        os.environ.pop("SKINET_CACHE_DIR", None)
    else:
        os.environ["SKINET_CACHE_DIR"] = previous


@pytest.fixture(scope="session")
def synthetic_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small synthetic dataset in the official ISIC 2017 layout (8/4/4 images, 64x64)."""
    from skinet.datasets.synthetic import make_synthetic_dataset

    root = tmp_path_factory.mktemp("synthetic_isic2017")
    make_synthetic_dataset(root, num_train=8, num_val=4, num_test=4, image_size=64, seed=0)
    return root


@pytest.fixture(scope="session")
def mlflow_db_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An initialised MLflow SQLite database; copying it skips the slow schema migrations."""
    from mlflow.tracking import MlflowClient

    path = tmp_path_factory.getbasetemp() / "mlflow_template.db"
    MlflowClient(f"sqlite:///{path}").search_experiments()
    return path


@pytest.fixture
def tiny_raw(tmp_path: Path, synthetic_root: Path) -> dict[str, Any]:
    """Plain-data tiny config reading the session's synthetic dataset."""
    return tiny_raw_config(tmp_path, synthetic_root)


@pytest.fixture
def tiny_config(tiny_raw: dict[str, Any]) -> ExperimentConfig:
    """A validated tiny config reading the session's synthetic dataset."""
    return parse_config(tiny_raw)


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


@pytest.fixture(scope="session")
def trained_checkpoint(tmp_path_factory: pytest.TempPathFactory, synthetic_root: Path) -> Path:
    """A real SkiNet checkpoint: the tiny 32x32 config trained for one epoch by run_training."""
    from skinet.training.run import run_training

    tmp = tmp_path_factory.mktemp("trained")
    raw = tiny_raw_config(tmp, synthetic_root)
    raw["TRAIN_CONFIG"].update(max_epochs=1, use_mlflow_logger=False)
    result = run_training(parse_config(raw), visualize=False)
    assert result.best_checkpoint is not None
    return result.best_checkpoint
