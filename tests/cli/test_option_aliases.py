"""One name per thing on the command line; the earlier spellings still parse, hidden from --help."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pytest
from tests.helpers.inference import run_cli, write_mask

from skinet.cli.main import build_parser

PREDICT = ["predict", "--checkpoint", "m.ckpt", "-o", "out"]
EVALUATE = ["evaluate", "-o", "out"]
ROBUSTNESS = ["robustness", "--checkpoint", "m.ckpt", "-o", "out"]
DOWNLOAD = ["data", "download", "isic2017"]

# (command line without the option, the documented spelling, the old one, the dest it sets)
ALIASES = [
    (PREDICT, "--images", "--input", "input"),
    (EVALUATE, "--data-dir", "--data", "data"),
    (EVALUATE, "--masks", "--ground-truth", "masks"),
    (ROBUSTNESS, "--data-dir", "--data", "data"),
    (DOWNLOAD, "--data-dir", "--dest", "dest"),
]
IDS = [f"{argv[0]}{old}" for argv, _, old, _ in ALIASES]


def _subparser(path: list[str]) -> argparse.ArgumentParser:
    parser = build_parser()
    for word in path:
        action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        parser = action.choices[word]
    return parser


@pytest.mark.parametrize(("argv", "new", "old", "dest"), ALIASES, ids=IDS)
def test_an_old_spelling_sets_what_the_new_one_sets(
    argv: list[str], new: str, old: str, dest: str
) -> None:
    parser = build_parser()
    as_new = parser.parse_args([*argv, new, "folder"])
    as_old = parser.parse_args([*argv, old, "folder"])
    assert getattr(as_new, dest) == getattr(as_old, dest)
    assert str(getattr(as_old, dest)) == "folder"


@pytest.mark.parametrize(("argv", "new", "old", "dest"), ALIASES, ids=IDS)
def test_help_shows_only_the_new_spelling(argv: list[str], new: str, old: str, dest: str) -> None:
    text = _subparser(argv[:2] if argv[0] == "data" else argv[:1]).format_help()
    assert new in text
    assert f"{old} " not in text and f"{old}\n" not in text and f"{old}," not in text


def test_short_flags_for_the_one_input_and_the_one_output() -> None:
    parser = build_parser()
    args = parser.parse_args(["predict", "--checkpoint", "m.ckpt", "-i", "in", "-o", "out"])
    assert (str(args.input), str(args.output)) == ("in", "out")
    for command in (["evaluate"], ["robustness", "--checkpoint", "m.ckpt"]):
        args = parser.parse_args([*command, "-i", "in", "-o", "out"])
        assert (str(args.images), str(args.output)) == ("in", "out")
    args = parser.parse_args(["export", "--checkpoint", "m.ckpt", "--format", "onnx", "-o", "m"])
    assert str(args.output) == "m"


def test_a_required_option_is_met_by_its_old_spelling(capsys: pytest.CaptureFixture[str]) -> None:
    parser = build_parser()
    assert str(parser.parse_args([*PREDICT, "--input", "in"]).input) == "in"
    with pytest.raises(SystemExit):
        parser.parse_args(PREDICT)
    error = capsys.readouterr().err
    assert "-i/--images" in error and "--input" not in error  # the error names the new spelling


def test_evaluate_scores_predictions_against_ground_truth_in_either_spelling(
    tmp_path: Path,
) -> None:
    preds, truth = tmp_path / "pred", tmp_path / "truth"
    preds.mkdir(), truth.mkdir()
    mask = np.zeros((8, 8), dtype=bool)
    mask[2:6, 2:6] = True
    write_mask(preds / "a_mask.png", mask)
    write_mask(truth / "a_segmentation.png", mask)
    for option in ("--masks", "--ground-truth"):
        out = tmp_path / option.strip("-")
        argv = ["evaluate", "--predictions", str(preds), option, str(truth), "-o", str(out)]
        assert run_cli([*argv, "--gallery", "0"]) == 0
        assert json.loads((out / "summary.json").read_text())["mean_jaccard"] == 1.0
