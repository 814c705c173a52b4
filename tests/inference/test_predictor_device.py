"""Where prediction runs: ``--device auto|cpu|cuda|mps``, CUDA and MPS simulated."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from tests.helpers.inference import run_cli, write_rgb

from skinet.config.errors import UsageError
from skinet.inference.predictor import resolve_device


def _simulate(monkeypatch: pytest.MonkeyPatch, *, cuda: bool, mps: bool) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: mps)


@pytest.mark.parametrize(
    ("cuda", "mps", "asked", "expected"),
    [
        (True, False, "auto", "cuda"),
        (False, True, "auto", "mps"),
        (False, False, "auto", "cpu"),
        (False, True, "mps", "mps"),
        (True, False, "cuda", "cuda"),
        (True, True, "cpu", "cpu"),
    ],
)
def test_resolve_device(
    monkeypatch: pytest.MonkeyPatch, cuda: bool, mps: bool, asked: str, expected: str
) -> None:
    _simulate(monkeypatch, cuda=cuda, mps=mps)
    assert resolve_device(asked).type == expected


@pytest.mark.parametrize("asked", ["cuda", "mps"])
def test_missing_device_is_a_clear_error(monkeypatch: pytest.MonkeyPatch, asked: str) -> None:
    _simulate(monkeypatch, cuda=False, mps=False)
    with pytest.raises(UsageError, match=f"--device {asked} was requested"):
        resolve_device(asked)


@pytest.mark.parametrize("command", ["predict", "evaluate"])
def test_cli_takes_device_mps(
    trained_checkpoint: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    command: str,
) -> None:
    _simulate(monkeypatch, cuda=False, mps=False)
    image = tmp_path / "in.png"
    write_rgb(image, 40, 40)
    source = ["--images", str(image)] if command == "predict" else []
    argv = [command, "--checkpoint", str(trained_checkpoint), *source]
    code = run_cli([*argv, "--output", str(tmp_path / "out"), "--device", "mps"])
    assert code == 2  # parsed, then refused on this machine, with the reason
    assert "--device mps was requested" in caplog.text
