"""The values export's options take, in a module that imports nothing.

``skinet export`` offers them as choices and defaults while the parser is built, so
``skinet --help`` reads them without importing torch; :mod:`skinet.inference.export` uses the
same values.
"""

from __future__ import annotations

from typing import Literal, get_args

ExportFormat = Literal["onnx", "torchscript"]
EXPORT_FORMATS: tuple[str, ...] = get_args(ExportFormat)
DEFAULT_TOLERANCE = 1e-4
"""Largest accepted ``|exported - PyTorch|`` of the parity check on random inputs."""
DEFAULT_OPSET = 18
"""ONNX opset version of an export."""
