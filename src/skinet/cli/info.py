"""``skinet info``: versions, devices and data roots, as plain text to paste into a bug report.

Every probe is guarded: a missing package reads ``not installed`` and a machine without an
NVIDIA driver reads ``NVML: not available``, so the report itself never fails.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import importlib.util
import os
import platform
import sys
from collections.abc import Mapping
from importlib import metadata
from pathlib import Path
from typing import Any

from skinet import __version__
from skinet.runtime.allocator import malloc_tuning

PACKAGES = (
    ("lightning", "lightning"),
    ("torchmetrics", "torchmetrics"),
    ("mlflow", "mlflow"),
    ("optuna", "optuna"),
    ("albumentations", "albumentations"),
    ("opencv", "cv2"),
    ("pydantic", "pydantic"),
    ("numpy", "numpy"),
)
"""(name shown, module) of the libraries whose versions a bug report needs."""


def _module_version(module: str) -> str:
    """The version of the distribution that installs ``module``, read from its metadata.

    Nothing is imported (Lightning, MLflow and Optuna take seconds to import) unless the module
    comes from no installed distribution (a source checkout on the path).
    """
    try:
        if importlib.util.find_spec(module) is None:
            return "not installed"
    except (ImportError, ValueError):
        return "not installed"
    for distribution in _distributions().get(module, []):
        try:
            return metadata.version(distribution)
        except metadata.PackageNotFoundError:
            continue
    try:
        return str(getattr(importlib.import_module(module), "__version__", "installed"))
    except Exception as error:  # an ImportError, or a library broken at import
        return "not installed" if isinstance(error, ImportError) else f"broken ({error})"


@functools.cache
def _distributions() -> Mapping[str, list[str]]:
    return metadata.packages_distributions()


def _torch_lines() -> list[str]:
    try:
        import torch
    except ImportError:
        return ["torch: not installed"]
    lines = [f"torch: {torch.__version__}"]
    cuda = torch.cuda.is_available()
    lines.append(f"  CUDA available: {cuda} (built for CUDA {torch.version.cuda})")
    if cuda:
        cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
        lines.append(f"  cuDNN: {cudnn}")
        for index in range(torch.cuda.device_count()):
            props = torch.cuda.get_device_properties(index)
            memory = props.total_memory / 2**30
            lines.append(f"  cuda:{index}: {props.name}, {memory:.1f} GiB")
    mps = getattr(torch.backends, "mps", None)
    lines.append(f"  MPS available: {bool(mps and mps.is_available())}")
    lines.append(f"  threads: {torch.get_num_threads()}")
    lines.append(f"  CPU bfloat16: {_cpu_bf16_line()}")
    return lines


def _cpu_bf16_line() -> str:
    from skinet.runtime.devices import cpu_has_native_bf16

    if cpu_has_native_bf16():
        return "native (TRAIN_CONFIG.precision: bf16-mixed trains faster than 32-true here)"
    return "emulated (keep TRAIN_CONFIG.precision: 32-true on this CPU)"


def _nvml_line() -> str:
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            driver = pynvml.nvmlSystemGetDriverVersion()
            count = pynvml.nvmlDeviceGetCount()
        finally:
            pynvml.nvmlShutdown()
    except ImportError:
        return "NVML: not installed (GPU utilisation is not logged)"
    except Exception as error:  # NVMLError_LibraryNotFound on machines without a driver
        return f"NVML: not available ({type(error).__name__}; GPU utilisation is not logged)"
    driver = driver.decode() if isinstance(driver, bytes) else driver
    return f"NVML: driver {driver}, {count} GPU(s)"


def _cpu_line() -> str:
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return f"CPUs: {os.cpu_count()} ({usable} usable by this process)"


def _data_lines(config: Path | None) -> list[str]:
    try:
        from skinet.config.data import DataConfig
        from skinet.config.experiment import load_config
        from skinet.datasets.locate import candidate_roots
        from skinet.datasets.registry import data_dir_of

        data = load_config(config).data if config is not None else DataConfig()
        data_dir = data_dir_of(data)
        roots = candidate_roots(data_dir, data.azure_blob_mount_point, data.local_data_root)
    except Exception as error:  # a broken config must not hide the rest of the report
        return [f"data roots: cannot tell ({error})"]
    source = str(config) if config is not None else "the defaults"
    lines = [f"data roots searched for DATA_CONFIG.data_dir={data_dir!r} ({source}), in order:"]
    lines += [f"  {root}  [{'found' if root.is_dir() else 'missing'}]" for root in roots]
    return lines


def collect_info(config: Path | None = None) -> list[str]:
    """The lines of the report; ``config`` chooses whose data roots are listed."""
    lines = [
        f"SkiNet: {__version__} ({Path(__file__).resolve().parents[1]})",
        f"Python: {sys.version.split()[0]} ({sys.executable})",
        f"platform: {platform.platform()}",
        *_torch_lines(),
        *(f"{name}: {_module_version(module)}" for name, module in PACKAGES),
        _nvml_line(),
        _cpu_line(),
        f"allocator: {malloc_tuning()}",
        *_data_lines(config),
    ]
    return lines


def run_info(args: argparse.Namespace) -> int:
    """Print the environment report."""
    print("\n".join(collect_info(args.config)))
    return 0


def add_info_subcommand(subparsers: Any) -> None:
    """Register ``info``; it sets ``func`` to its handler."""
    info = subparsers.add_parser(
        "info", help="versions, devices and data roots (paste into a bug report)"
    )
    info.add_argument(
        "--config", type=Path, help="list the data roots of this config (default: the defaults)"
    )
    info.set_defaults(func=run_info)
