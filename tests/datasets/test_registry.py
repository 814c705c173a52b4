"""The registry of dataset layouts: every entry complete, and the one source of layout names."""

from __future__ import annotations

import argparse
import inspect
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import get_args

import pytest

import skinet.config.data
from skinet.cli.main import build_parser
from skinet.config.data import DataConfig, DatasetName
from skinet.datasets.download import archive_urls
from skinet.datasets.layouts import DatasetIndex
from skinet.datasets.registry import DOWNLOADABLE, LAYOUTS, data_dir_of, get_layout, read_layout


@pytest.mark.parametrize("name", list(LAYOUTS))
def test_every_layout_has_reader_folder_licence_and_download_or_why_not(
    name: str, tmp_path: Path
) -> None:
    layout = LAYOUTS[name]
    assert layout.name == name
    assert DataConfig(dataset=name).dataset == name  # a valid DATA_CONFIG.dataset
    assert isinstance(read_layout(tmp_path, name), DatasetIndex)  # its reader runs
    assert layout.default_dir.startswith("data/") and len(layout.licence) > 20
    if layout.download is None:
        assert layout.no_download, f"{name}: say why there is no download"
        with pytest.raises(
            ValueError, match=re.escape(f"{name!r} has no download: {layout.no_download}")
        ):
            archive_urls(name)
    else:
        assert not layout.no_download and layout.download.archives
        assert len(archive_urls(name)) == len(layout.download.archives)
    assert data_dir_of(DataConfig(dataset=name)) == layout.default_dir
    assert data_dir_of(DataConfig(dataset=name, data_dir="/mine")) == "/mine"
    # The documented default of DATA_CONFIG.data_dir names the folder of every layout.
    assert f"``{layout.default_dir}``" in inspect.getsource(skinet.config.data)


def test_registry_and_config_list_the_same_layouts() -> None:
    assert tuple(LAYOUTS) == get_args(DatasetName)
    with pytest.raises(ValueError, match="unknown dataset 'isic2019'; choose one of synthetic, "):
        get_layout("isic2019")


def _dataset_choices(parser: argparse.ArgumentParser, path: str = "skinet") -> Iterator:
    """``(command, option, choices)`` of every dataset option of the command line."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _dataset_choices(sub, f"{path} {name}")
        elif action.dest == "dataset":
            yield path, action.option_strings, tuple(action.choices or ())


def test_cli_dataset_choices_are_the_registry_keys() -> None:
    found = list(_dataset_choices(build_parser()))
    assert len(found) >= 4  # data verify, data stats, data download, evaluate, ...
    for command, options, choices in found:
        expected = DOWNLOADABLE if command == "skinet data download" else tuple(LAYOUTS)
        assert choices == expected, (command, options)
    assert DOWNLOADABLE == ("isic2017", "isic2018")


@pytest.mark.process
def test_importing_the_registry_loads_no_numpy_torch_or_opencv() -> None:
    code = (
        "import sys, skinet.datasets.registry; "
        "print(sorted(m for m in ('numpy', 'torch', 'cv2') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
