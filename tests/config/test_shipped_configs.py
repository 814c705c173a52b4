"""The wheel ships every file of ``configs/`` (for ``skinet config init``), and each one loads."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest
import yaml

from skinet.config.experiment import load_config
from skinet.config.templates import template_names, template_text

REPO = Path(__file__).resolve().parents[2]
SHIPPED = sorted(REPO.joinpath("configs").glob("*.yaml"))


def test_the_package_sees_the_files_of_configs() -> None:
    """Through the link src/skinet/configs -> ../../configs (a clone without symlinks lacks it)."""
    assert template_names() == [path.stem for path in SHIPPED]
    for path in SHIPPED:
        assert template_text(path.stem) == path.read_text()


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.stem)
def test_every_shipped_config_is_valid(path: Path) -> None:
    """An experiment config loads; a TRANSFORM_CONFIG snippet loads as that section."""
    assert set(yaml.safe_load(path.read_text())) <= {
        "TRAIN_CONFIG",
        "MODEL_CONFIG",
        "DATA_CONFIG",
        "TRANSFORM_CONFIG",
        "SWEEP_CONFIG",
    }
    load_config(path)


@pytest.mark.process
@pytest.mark.heavy
def test_the_wheel_holds_every_file_of_configs(tmp_path: Path) -> None:
    """Built as pip builds from PyPI: an sdist of a copy of the sources (the link
    src/skinet/configs -> configs kept a link), then the wheel from that sdist."""
    source = tmp_path / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy2(REPO / name, source / name)
    for name in ("src", "configs"):
        shutil.copytree(
            REPO / name, source / name, symlinks=True, ignore=shutil.ignore_patterns("__pycache__")
        )
    assert (source / "src" / "skinet" / "configs").is_symlink()
    build_sdist = "from setuptools import build_meta; print(build_meta.build_sdist('../sdist'))"
    built = subprocess.run(
        [sys.executable, "-c", build_sdist],
        cwd=source,
        check=True,
        timeout=300,
        capture_output=True,
        text=True,
    )
    sdist = tmp_path / "sdist" / built.stdout.strip().splitlines()[-1]
    with tarfile.open(sdist) as archive:
        archive.extractall(tmp_path / "unpacked", filter="data")
    (unpacked,) = (tmp_path / "unpacked").iterdir()
    command = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation"]
    command += ["--quiet", "--wheel-dir", str(tmp_path / "dist"), str(unpacked)]
    subprocess.run(command, check=True, timeout=300, capture_output=True)
    (wheel,) = (tmp_path / "dist").glob("skinet-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        packaged = {
            name.removeprefix("skinet/configs/"): archive.read(name)
            for name in archive.namelist()
            if name.startswith("skinet/configs/")
        }
    assert packaged == {path.name: path.read_bytes() for path in SHIPPED}
