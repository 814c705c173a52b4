"""``skinet export``: TorchScript and ONNX with sigmoid, dynamic shapes and a real parity check."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
import torch
from tests.helpers.config import requires_modules
from tests.helpers.inference import run_cli

from skinet.checkpoints.read import build_model, load_checkpoint
from skinet.inference.export import (
    ExportError,
    ProbabilityModel,
    card_path,
    check_parity,
    export_checkpoint,
    run_exported,
)

NEEDS_ONNX = requires_modules("onnx", "onnxscript", "onnxruntime")


@pytest.fixture(scope="module")
def torchscript_file(trained_checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The checkpoint exported by ``skinet export --format torchscript`` (exit code checked)."""
    output = tmp_path_factory.mktemp("export") / "model.pt"
    argv = ["export", "--checkpoint", str(trained_checkpoint), "--format", "torchscript"]
    assert run_cli([*argv, "--output", str(output)]) == 0
    return output


def test_torchscript_export_parity_and_free_shapes(
    trained_checkpoint: Path, torchscript_file: Path
) -> None:
    output = torchscript_file
    sidecar = json.loads(output.with_name("model.pt.json").read_text())
    assert sidecar["image_size"] == 32 and sidecar["size_multiple"] == 4
    assert sidecar["normalization_mode"] == "standard" and len(sidecar["mean"]) == 3
    assert sidecar["threshold"] == pytest.approx(load_checkpoint(trained_checkpoint).threshold)
    assert sidecar["parity"]["max_abs_diff"] <= 1e-4
    # Another batch size and a non-square size (multiples of size_multiple) run and agree.
    reference = ProbabilityModel(build_model(load_checkpoint(trained_checkpoint))).eval()
    images = torch.randn(3, 3, 48, 20)
    probs = run_exported(output, "torchscript", images)
    assert probs.shape == (3, 1, 48, 20)
    torch.testing.assert_close(probs, reference(images).detach(), atol=1e-5, rtol=0)


def test_the_exported_card_names_the_run_folder_it_was_copied_from(
    trained_checkpoint: Path, torchscript_file: Path
) -> None:
    """The run's card goes beside the export: its splits.csv and config.yaml stay behind."""
    card = card_path(torchscript_file).read_text()
    run_dir = trained_checkpoint.resolve().parent.parent
    assert "beside this card" not in card
    assert f"the split used is `splits.csv` in the run folder `{run_dir}`" in card
    assert f"with this config (`config.yaml` in the run folder `{run_dir}`;" in card


def test_parity_fails_against_a_different_model(
    trained_checkpoint: Path, torchscript_file: Path
) -> None:
    output = torchscript_file
    wrong = ProbabilityModel(build_model(load_checkpoint(trained_checkpoint)))
    with torch.no_grad():
        wrong.model.head.bias += 0.5  # a real, different model: sigmoid shifts everywhere
    result = check_parity(wrong, output, "torchscript", ((1, 3, 32, 32),), tolerance=1e-4)
    assert not result.passed and result.max_abs_diff > 1e-3
    exact = ProbabilityModel(build_model(load_checkpoint(trained_checkpoint)))
    assert check_parity(exact, output, "torchscript", ((1, 3, 32, 32),), tolerance=0.0).passed


def test_bad_export_options(trained_checkpoint: Path, tmp_path: Path) -> None:
    with pytest.raises(ExportError, match="tolerance"):
        export_checkpoint(trained_checkpoint, tmp_path / "m.pt", "torchscript", tolerance=-1)
    with pytest.raises(ExportError, match="format"):
        export_checkpoint(trained_checkpoint, tmp_path / "m.x", "tflite")  # type: ignore[arg-type]


def test_onnx_without_packages_says_what_to_install(
    trained_checkpoint: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name.startswith("onnx") else real_find_spec(name, *a),
    )
    with pytest.raises(ExportError, match=r"pip install 'skinet\[onnx\]'"):
        export_checkpoint(trained_checkpoint, tmp_path / "m.onnx", "onnx")
    argv = ["export", "--checkpoint", str(trained_checkpoint), "--format", "onnx"]
    assert run_cli([*argv, "--output", str(tmp_path / "m.onnx")]) == 1


@NEEDS_ONNX
def test_onnx_export_parity_and_tolerance(
    trained_checkpoint: Path, tmp_path: Path, capfd: pytest.CaptureFixture[str], caplog
) -> None:
    output = tmp_path / "model.onnx"
    argv = ["export", "--checkpoint", str(trained_checkpoint), "--format", "onnx"]
    assert run_cli([*argv, "--output", str(output), "--opset", "18"]) == 0
    said = "".join(capfd.readouterr()) + caplog.text
    assert "Skipping torchvision" not in said  # operators UNet2D does not use
    sidecar = json.loads((tmp_path / "model.onnx.json").read_text())
    diff = sidecar["parity"]["max_abs_diff"]
    assert sidecar["opset"] == 18 and diff <= 1e-4
    images = torch.randn(2, 3, 24, 36)
    assert run_exported(output, "onnx", images).shape == (2, 1, 24, 36)
    # A different model against the exported graph is a real failing comparison.
    wrong = ProbabilityModel(build_model(load_checkpoint(trained_checkpoint)))
    with torch.no_grad():
        wrong.model.head.weight.mul_(-1.0)
    assert not check_parity(wrong, output, "onnx", ((1, 3, 32, 32),)).passed


@pytest.mark.slow
@NEEDS_ONNX
def test_onnx_cli_exit_code_follows_the_measured_difference(
    trained_checkpoint: Path, tmp_path: Path
) -> None:
    output = tmp_path / "model.onnx"
    argv = ["export", "--checkpoint", str(trained_checkpoint), "--format", "onnx"]
    code = run_cli([*argv, "--output", str(output), "--tolerance", "0"])
    diff = json.loads((tmp_path / "model.onnx.json").read_text())["parity"]["max_abs_diff"]
    assert code == (1 if diff > 0 else 0)
