"""Exporting a trained model (sigmoid included) to TorchScript or ONNX, with a parity check.

The exported graph maps a *normalised* image batch to probabilities:
``float32 (N, 3, H, W) -> float32 (N, 1, H, W)`` in ``[0, 1]``, with ``N`` free and ``H``, ``W``
any multiples of ``size_multiple = stride ** (number_of_layers - 1)`` (16 for the default
5-layer model). Preprocess as in training (``DATA_CONFIG.crop_dark_border``, ``resize_mode``,
``color_constancy``, letterbox padding: the ``preprocessing`` entry), then normalise:
``(pixel / 255 - mean) / std`` per RGB channel for ``normalization_mode: standard``, or each
image's own per-channel mean/std for ``image_per_channel``. These values are written to a JSON
sidecar ``<output>.json`` next to the exported file, complete enough to run the model without
SkiNet.
"""

from __future__ import annotations

import importlib.util
import io
import json
import logging
import warnings
from collections.abc import Callable, Sequence
from contextlib import redirect_stdout
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from skinet.checkpoints.calibrated_card import (
    calibrate_card,
    checkpoint_card_path,
    find_checkpoint_card,
    moved_card,
)
from skinet.checkpoints.model_card import CardInputs, build_model_card, invoked_command
from skinet.checkpoints.read import SkinetCheckpoint, build_model, load_checkpoint
from skinet.checkpoints.threshold import Threshold
from skinet.imaging.preprocess import build_preprocessing
from skinet.inference.options import DEFAULT_OPSET, DEFAULT_TOLERANCE, EXPORT_FORMATS, ExportFormat
from skinet.models.unet2d import UNet2D

log = logging.getLogger(__name__)

INPUT_NAME, OUTPUT_NAME = "images", "probs"


class ExportError(ValueError):
    """Export is impossible here (missing package, bad options) or failed its parity check."""


class ProbabilityModel(nn.Module):
    """UNet2D followed by sigmoid: normalised ``(N, 3, H, W)`` -> probabilities ``(N, 1, H, W)``."""

    def __init__(self, model: UNet2D) -> None:
        super().__init__()
        self.model = model
        self.size_multiple = int(model.size_multiple)

    def forward(self, images: Tensor) -> Tensor:
        return torch.sigmoid(self.model(images))


@dataclass(frozen=True)
class ParityResult:
    """Largest absolute difference between PyTorch and the exported model, per input shape."""

    max_abs_diff: float
    tolerance: float
    shapes: tuple[tuple[int, ...], ...]

    @property
    def passed(self) -> bool:
        """Whether ``max_abs_diff <= tolerance``."""
        return self.max_abs_diff <= self.tolerance


def _size_multiple(model: nn.Module) -> int:
    multiple: int = getattr(model, "size_multiple")  # noqa: B009 - UNet2D and the wrappers
    return int(multiple)


def example_shapes(model: nn.Module, image_size: int) -> tuple[tuple[int, ...], ...]:
    """The export input shape and a second one with another batch and spatial size."""
    multiple = _size_multiple(model)
    side = max(multiple, -(-image_size // multiple) * multiple)  # image_size rounded up
    return (2, 3, side, side), (1, 3, side + multiple, side + 2 * multiple)


def require_onnx() -> None:
    """Raise :class:`ExportError` naming the packages to install when ONNX export cannot run."""
    missing = [name for name in ("onnx", "onnxscript") if importlib.util.find_spec(name) is None]
    if missing:
        raise ExportError(
            f"--format onnx needs the {' and '.join(missing)} package(s): "
            "pip install 'skinet[onnx]' (or: pip install onnx onnxscript onnxruntime)"
        )


def export_torchscript(model: nn.Module, example: Tensor, output: Path) -> None:
    """Trace ``model`` on ``example`` and save it; shapes stay free (no shape-dependent branch
    is taken for sizes that are multiples of ``size_multiple``)."""
    with warnings.catch_warnings():
        # The tracer warns about UNet2D's shape checks, which are constant for valid inputs,
        # and torch 2.13 deprecates torch.jit (TorchScript still loads without Python code).
        warnings.simplefilter("ignore", torch.jit.TracerWarning)
        warnings.simplefilter("ignore", DeprecationWarning)
        traced = torch.jit.trace(model, example, check_trace=False)
    traced.save(str(output))


def export_onnx(model: nn.Module, example: Tensor, output: Path, opset: int) -> None:
    """Export with the dynamo exporter; batch free, height and width free multiples."""
    require_onnx()
    multiple = _size_multiple(model)
    batch = torch.export.Dim("batch", min=1, max=1024)
    # Derived dims make "H is a multiple of size_multiple" part of the graph's contract, so
    # UNet2D's padding branch is resolved symbolically instead of specialised to one size.
    height = multiple * torch.export.Dim("height_blocks", min=1, max=8192 // multiple)
    width = multiple * torch.export.Dim("width_blocks", min=1, max=8192 // multiple)
    # The exporter logs a warning per torchvision operator it skips when torchvision is not
    # installed: UNet2D uses none of them.
    registry = logging.getLogger("torch.onnx._internal.exporter._registration")
    level = registry.level
    registry.setLevel(logging.ERROR)
    with redirect_stdout(io.StringIO()), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            program = torch.onnx.export(
                model,
                (example,),
                dynamic_shapes={INPUT_NAME: {0: batch, 2: height, 3: width}},
                input_names=[INPUT_NAME],
                output_names=[OUTPUT_NAME],
                opset_version=opset,
                dynamo=True,
                external_data=False,
                verbose=False,
            )
        finally:
            registry.setLevel(level)
    if program is None:
        raise ExportError("torch.onnx.export returned no program")
    program.save(str(output), external_data=False)


def load_exported(path: Path, fmt: ExportFormat) -> Callable[[Tensor], Tensor]:
    """A CPU callable of an exported file: ``torch.jit.load``, or an ONNX Runtime session."""
    if fmt == "torchscript":
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # torch.jit is deprecated
            module = torch.jit.load(str(path), map_location="cpu")

        def run_module(images: Tensor) -> Tensor:
            with torch.inference_mode():
                return module(images)

        return run_module
    import onnxruntime as ort

    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])

    def run_session(images: Tensor) -> Tensor:
        (probs,) = session.run([OUTPUT_NAME], {INPUT_NAME: images.numpy()})
        return torch.from_numpy(probs)

    return run_session


def run_exported(path: Path, fmt: ExportFormat, images: Tensor) -> Tensor:
    """Run an exported file once on CPU (see :func:`load_exported`)."""
    return load_exported(path, fmt)(images)


def check_parity(
    reference: nn.Module,
    path: Path,
    fmt: ExportFormat,
    shapes: tuple[tuple[int, ...], ...],
    tolerance: float = DEFAULT_TOLERANCE,
    seed: int = 0,
) -> ParityResult:
    """Compare ``reference`` (PyTorch, CPU) with the exported file on random normal inputs."""
    generator = torch.Generator().manual_seed(seed)
    worst = 0.0
    reference = reference.eval().cpu()
    exported = load_exported(path, fmt)
    for shape in shapes:
        images = torch.randn(shape, generator=generator)
        with torch.inference_mode():
            expected = reference(images)
        actual = exported(images)
        if actual.shape != expected.shape:
            raise ExportError(
                f"exported model returned shape {tuple(actual.shape)} for input {shape}, "
                f"PyTorch returned {tuple(expected.shape)}"
            )
        worst = max(worst, float((actual.float() - expected.float()).abs().max()))
    return ParityResult(worst, tolerance, shapes)


def build_sidecar(
    checkpoint: SkinetCheckpoint, fmt: ExportFormat, model: nn.Module, opset: int | None
) -> dict[str, Any]:
    """What a consumer needs to feed the exported graph and threshold its output."""
    threshold = checkpoint.threshold_choice
    data = checkpoint.config.data
    return {
        "format": fmt,
        "opset": opset if fmt == "onnx" else None,
        "input": {
            "name": INPUT_NAME,
            "layout": "NCHW float32, RGB",
            "normalization": "(pixel / 255 - mean) / std per channel"
            if data.normalization_mode == "standard"
            else "per image and channel: (x - x.mean()) / max(x.std(), 1e-6), x = pixel / 255",
        },
        "output": {"name": OUTPUT_NAME, "layout": "N1HW float32 probabilities (sigmoid applied)"},
        "image_size": data.image_size,
        "size_multiple": _size_multiple(model),
        "normalization_mode": data.normalization_mode,
        "mean": list(data.mean),
        "std": list(data.std),
        "preprocessing": build_preprocessing(data).describe(),
        "threshold": threshold.value,
        "threshold_source": threshold.to_dict(),
        # A calibration's --tune-tta choice: the graph is one view; average the flips outside.
        "tta": checkpoint.tta,
        "checkpoint": str(checkpoint.path),
    }


def sidecar_path(output: Path) -> Path:
    """``model.onnx`` -> ``model.onnx.json``."""
    return output.with_name(output.name + ".json")


def export_checkpoint(
    checkpoint_path: str | Path | Sequence[str | Path],
    output: str | Path,
    fmt: ExportFormat = "torchscript",
    opset: int = DEFAULT_OPSET,
    tolerance: float = DEFAULT_TOLERANCE,
) -> ParityResult | None:
    """Export a checkpoint's model with sigmoid, write the JSON sidecar and check parity.

    Several checkpoints (or a ``skinet cv`` folder) export as one graph returning the mean of
    the members' probabilities; the sidecar's threshold is the mean of theirs. A model card
    ``<output>.MODEL_CARD.md`` is written beside the file.

    Returns:
        The parity result, or ``None`` for ONNX when onnxruntime is not installed (skipped).

    Raises:
        ExportError: A package is missing, or the parity check exceeded ``tolerance`` (the
            exported file and sidecar are kept for inspection).
    """
    if fmt not in EXPORT_FORMATS:
        raise ExportError(f"format must be 'onnx' or 'torchscript', got {fmt!r}")
    if tolerance < 0:
        raise ExportError(f"tolerance must be >= 0, got {tolerance}")
    if fmt == "onnx":
        require_onnx()
    from skinet.inference.ensemble import ensemble_flips, ensemble_threshold

    listed = [checkpoint_path] if isinstance(checkpoint_path, str | Path) else checkpoint_path
    checkpoints, wrapper = _load_for_export(listed)
    checkpoint = checkpoints[0]
    shapes = example_shapes(wrapper, checkpoint.config.data.image_size)
    output = Path(output)
    output.parent.mkdir(parents=True, exist_ok=True)
    example = torch.randn(shapes[0])
    if fmt == "torchscript":
        export_torchscript(wrapper, example, output)
    else:
        export_onnx(wrapper, example, output, opset)
    sidecar = build_sidecar(checkpoint, fmt, wrapper, opset)
    # One checkpoint: the threshold of the way its calibration chose, as the sidecar says.
    one = len(checkpoints) == 1
    threshold = ensemble_threshold(listed, checkpoints, flips=one and bool(sidecar["tta"]))
    if len(checkpoints) > 1:
        sidecar.update(threshold=threshold.value, threshold_source=threshold.to_dict())
        sidecar["checkpoint"] = [str(c.path) for c in checkpoints]
        sidecar["ensemble"] = "mean of the members' probabilities"
        sidecar["tta"] = ensemble_flips(threshold)
    _warn_about_flips(checkpoints, sidecar_path(output).name, sidecar["tta"])
    parity: ParityResult | None = None
    if fmt == "onnx" and importlib.util.find_spec("onnxruntime") is None:
        log.warning("onnxruntime is not installed: parity check skipped (pip install onnxruntime)")
    else:
        parity = check_parity(wrapper, output, fmt, shapes, tolerance)
        sidecar["parity"] = {
            "max_abs_diff": parity.max_abs_diff,
            "tolerance": tolerance,
            "shapes": [list(s) for s in shapes],
        }
    sidecar_path(output).write_text(json.dumps(sidecar, indent=2))
    write_export_card(checkpoints, output, threshold)
    if parity is not None and not parity.passed:
        raise ExportError(
            f"parity check failed: max |exported - PyTorch| = {parity.max_abs_diff:.3g} > "
            f"tolerance {tolerance:g} on inputs {list(shapes)} ({output})"
        )
    return parity


def _warn_about_flips(checkpoints: Sequence[SkinetCheckpoint], sidecar: str, tta: bool) -> None:
    """Say where flips chosen by a tuning (``--tune-tta``; ``tta``: the sidecar's choice) do
    not reach the exported graph."""
    if tta:
        which = (
            f"{checkpoints[0].path} was calibrated"
            if len(checkpoints) == 1
            else "the cross-validation chose"
        )
        log.warning(
            "%s to predict with flips (--tune-tta), which the exported graph does not do: "
            "average its probabilities over the image and its horizontal, vertical and both "
            'flips before the threshold ("tta": true in %s)',
            which,
            sidecar,
        )
    elif len(checkpoints) > 1 and (flipped := [str(c.path) for c in checkpoints if c.tta]):
        log.warning(
            "ensemble members %s were calibrated with flips, which the exported graph does not "
            "use: the ensemble's threshold takes each one's threshold tuned without flips where "
            "its calibration recorded it",
            flipped,
        )


def _load_for_export(paths: Sequence[str | Path]) -> tuple[list[SkinetCheckpoint], nn.Module]:
    """The checkpoints and the module to export: one model, or the ensemble's mean."""
    from skinet.inference.ensemble import (
        EnsembleProbabilityModel,
        check_compatible,
        resolve_checkpoints,
    )

    checkpoints = [load_checkpoint(p) for p in resolve_checkpoints(paths)]
    check_compatible(checkpoints)
    if len(checkpoints) == 1:
        return checkpoints, ProbabilityModel(build_model(checkpoints[0])).eval()
    return checkpoints, EnsembleProbabilityModel([build_model(c) for c in checkpoints]).eval()


def card_path(output: Path) -> Path:
    """``model.onnx`` -> ``model.onnx.MODEL_CARD.md``."""
    return checkpoint_card_path(output)


def write_export_card(
    checkpoints: Sequence[SkinetCheckpoint], output: Path, threshold: Threshold
) -> Path:
    """For one checkpoint, its own card: the one beside it (a calibrated copy's), else its run
    folder's; else a new card. A calibrated checkpoint's card states its calibrated threshold
    (:func:`~skinet.checkpoints.calibrated_card.calibrate_card`)."""
    path = card_path(output)
    first = checkpoints[0]
    found = find_checkpoint_card(first.path)
    if len(checkpoints) == 1 and found is not None:
        text = found.read_text()
        if found.parent != path.parent.resolve():
            text = moved_card(text, f"in the run folder `{found.parent}`")
    else:
        # A calibrated copy's card is the source's, calibrated below.
        trained = first.payload.trained_threshold if len(checkpoints) == 1 else threshold
        text = build_model_card(first.config, _export_card_inputs(checkpoints, output, trained))
    if threshold.source == "calibrated":
        text = calibrate_card(text, threshold)
    path.write_text(text)
    return path


def _export_card_inputs(
    checkpoints: Sequence[SkinetCheckpoint], output: Path, threshold: Threshold
) -> CardInputs:
    first = checkpoints[0]
    return CardInputs(
        run_name=output.stem,
        metrics={},
        monitor=first.config.sweep.monitor,
        split_counts={},
        members=[str(c.path) for c in checkpoints] if len(checkpoints) > 1 else [],
        checkpoint=str(first.path) if len(checkpoints) == 1 else None,
        command=invoked_command(),
        threshold=threshold,
    )
