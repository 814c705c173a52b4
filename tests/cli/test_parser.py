"""The parser's own checks leave valid command lines alone."""

from __future__ import annotations

import pytest

from skinet.cli.main import build_parser


@pytest.mark.parametrize(
    "argv",
    [
        ["-v", "predict", "--verbose", "--checkpoint", "m.ckpt", "-i", "a", "-o", "o"],
        ["predict", "--check", "m.ckpt", "-i", "a", "-o", "o"],  # an abbreviation
        ["predict", "--checkpoint", "m.ckpt", "-i", "a", "-o", "o", "--threshold", "0.3"],
        ["evaluate", "--checkpoint", "a.ckpt", "b.ckpt", "--data-dir", "d", "-o", "r"],
        ["train", "--config", "c.yaml", "--set", "A.b=-1", "--set", "A.c=2"],
    ],
)
def test_valid_command_lines_parse(argv: list[str]) -> None:
    assert build_parser().parse_args(argv).func is not None


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["predict", "--chekpoint", "m", "-i", "a", "-o", "o"], "did you mean --checkpoint?"),
        (["predict", "--checkpoint", "m", "-i", "a", "--images=b", "-o", "o"], "-i and --images"),
        (["data", "verify", "--data-dri", "x"], "did you mean --data-dir?"),
    ],
)
def test_mistakes_are_named(argv: list[str], said: str, capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit) as exit_:
        build_parser().parse_args(argv)
    assert exit_.value.code == 2 and said in capsys.readouterr().err
