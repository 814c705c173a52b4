"""``skinet data verify|stats`` handlers and exit codes."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from rich.console import Console

from skinet.cli.data import add_data_subcommands, main
from skinet.datasets.layouts import ISIC2017_FOLDERS
from skinet.imaging.errors import DatasetError


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_data_subcommands(parser.add_subparsers(dest="command"))
    return parser.parse_args(argv)


def _run(argv: list[str]) -> tuple[int, str]:
    console = Console(record=True, width=200)
    args = _parse(argv)
    code = args.func(args, console=console)
    return code, console.export_text()


def test_verify_clean_dataset_exits_zero(isic2017_tree: Path) -> None:
    code, text = _run(["data", "verify", "--data-dir", str(isic2017_tree), "--dataset", "isic2017"])
    assert code == 0 and "OK" in text and "train 6" in text


def test_verify_reports_every_problem_and_exits_one(isic2017_tree: Path) -> None:
    images, masks = (isic2017_tree / n for n in ISIC2017_FOLDERS["train"])
    (masks / "ISIC_0000003_segmentation.png").unlink()
    (images / "ISIC_0000004.jpg").write_bytes(b"garbage")
    code, text = _run(["data", "verify", "--data-dir", str(isic2017_tree)])
    assert code == 1
    assert "2 problem(s)" in text
    assert "ISIC_0000003.jpg" in text and "missing mask" in text
    assert "ISIC_0000004.jpg" in text and "not a JPEG file" in text


@pytest.mark.process
def test_verify_from_config_via_python_m(tmp_path: Path, isic2017_tree: Path, tiny_raw) -> None:
    (isic2017_tree / ISIC2017_FOLDERS["val"][1] / "ISIC_0000007_segmentation.png").unlink()
    tiny_raw["DATA_CONFIG"]["data_dir"] = str(isic2017_tree)
    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump(tiny_raw))
    result = subprocess.run(
        [sys.executable, "-m", "skinet.cli.data", "verify", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 1, result.stderr
    assert "ISIC_0000007" in result.stdout
    assert main(["verify", "--config", str(config)]) == 1


def test_stats_prints_pasteable_yaml(isic2017_tree: Path, capsys) -> None:
    code, _ = _run(["data", "stats", "--data-dir", str(isic2017_tree)])
    assert code == 0
    block = yaml.safe_load(capsys.readouterr().out)["DATA_CONFIG"]
    assert block["normalization_mode"] == "standard"
    assert all(0.0 < m < 1.0 for m in block["mean"]) and all(0.0 < s < 0.5 for s in block["std"])


def test_stats_says_when_files_were_left_out_and_names_an_empty_split(
    isic2017_tree: Path, capsys, caplog
) -> None:
    images, masks = (isic2017_tree / n for n in ISIC2017_FOLDERS["train"])
    (masks / "ISIC_0000003_segmentation.png").unlink()
    code, _ = _run(["data", "stats", "--data-dir", str(isic2017_tree)])
    assert code == 0 and "# 5 images" in capsys.readouterr().out  # 6 training images, 1 unpaired
    assert "1 problem(s) in" in caplog.text and "ISIC_0000003.jpg: missing mask" in caplog.text
    for mask in masks.iterdir():
        mask.unlink()
    with pytest.raises(
        DatasetError, match=f"no image/mask pairs in split 'train' of {isic2017_tree}"
    ):
        _run(["data", "stats", "--data-dir", str(isic2017_tree)])
