"""Which hardware ``TRAIN_CONFIG`` trains on and how many processes its strategy starts.

These mirror Lightning's own choices (its ``_AcceleratorConnector``) as plain functions, so a
config validates on a machine without the devices it names and without initialising CUDA:
only ``torch.cuda.is_available``, ``torch.cuda.device_count`` and
``torch.backends.mps.is_available`` are asked, and only when the answer matters.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from skinet.config.experiment import RESOLVED_KEY, ExperimentConfig
from skinet.config.train import DeviceSpec, TrainConfig, parse_device_spec

ResolvedAccelerator = Literal["cpu", "gpu", "mps"]

SINGLE_PROCESS_STRATEGIES = ("single_device", "single_xla")
"""Strategy names that run one process whatever ``devices`` says; every other strategy
(``auto`` with several devices, ``ddp*``, ``fsdp``, ``deepspeed*``) starts one per device."""


def cuda_available() -> bool:
    """Whether torch sees a CUDA device (does not initialise CUDA)."""
    import torch

    return torch.cuda.is_available()


def mps_available() -> bool:
    """Whether torch sees Apple's Metal (MPS) backend."""
    import torch

    mps = getattr(torch.backends, "mps", None)
    return mps is not None and bool(mps.is_available())


def cuda_device_count() -> int:
    """CUDA devices visible to torch (does not initialise CUDA)."""
    import torch

    return torch.cuda.device_count()


def resolve_accelerator(accelerator: str) -> ResolvedAccelerator:
    """Map ``auto``/``gpu``/``cuda``/``mps``/``cpu`` to what this machine trains on.

    As Lightning does: ``auto`` and ``gpu`` are MPS on a machine with MPS and no CUDA (so
    ``gpu`` on a Mac is MPS, not CUDA), CUDA where there is CUDA, and ``auto`` is the CPU
    otherwise; ``cuda`` and ``mps`` are taken as named, and so is ``gpu`` on a machine with
    neither, where Lightning's own error then names the problem.
    """
    if accelerator == "cpu":
        return "cpu"
    if accelerator == "cuda":
        return "gpu"
    if accelerator == "mps":
        return "mps"
    if mps_available() and not cuda_available():
        return "mps"
    if accelerator == "gpu" or cuda_available():
        return "gpu"
    return "cpu"


def count_devices(
    accelerator: ResolvedAccelerator,
    devices: DeviceSpec,
    gpu_count: Callable[[], int] = cuda_device_count,
) -> int:
    """Devices per node Lightning uses for ``devices`` on ``accelerator`` (at least 1).

    ``auto`` and ``-1`` mean every CUDA device on ``gpu`` and one device on CPU and MPS, as
    Lightning's ``auto_device_count``. ``gpu_count`` is asked only then.
    """
    spec = parse_device_spec(devices)
    if isinstance(spec, list):
        return max(1, len(spec))
    if spec == "auto" or spec == -1:
        return max(1, gpu_count()) if accelerator == "gpu" else 1
    return max(1, spec)


def count_processes_per_node(
    accelerator: ResolvedAccelerator,
    devices: DeviceSpec,
    strategy: str,
    gpu_count: Callable[[], int] = cuda_device_count,
) -> int:
    """Processes Lightning starts on each node: one per device, or 1 for a single-device strategy.

    ``strategy: auto`` with several devices is DDP (Lightning picks it), so it counts like
    ``ddp``; with one device it is one process either way.
    """
    if strategy in SINGLE_PROCESS_STRATEGIES:
        return 1
    return count_devices(accelerator, devices, gpu_count)


@dataclass(frozen=True)
class TrainSettings:
    """What ``TRAIN_CONFIG``'s automatic values resolve to on this machine.

    A config keeps what the user wrote (``None`` for these); they are resolved here, where the
    ``Trainer`` and the loaders are built, so a run resumed or re-run on another machine gets that
    machine's values. A run writes them apart from its config
    (:data:`skinet.config.experiment.RESOLVED_KEY`).
    """

    accelerator: ResolvedAccelerator
    precision: str
    pin_memory: bool
    num_workers: int
    processes_per_node: int
    world_size: int

    def as_dict(self) -> dict[str, object]:
        """The settings as plain data, for ``config.yaml``, the checkpoint and MLflow."""
        return dataclasses.asdict(self)


def resolve_train_settings(train: TrainConfig) -> TrainSettings:
    """:class:`TrainSettings` of ``train`` on this machine (``None`` values are automatic).

    ``precision``: ``32-true`` on CPU, ``16-mixed`` on GPU and MPS. ``pin_memory``: on GPU.
    ``num_workers``: the CPU count divided among the DDP processes of this node (at least 1).
    """
    accelerator = resolve_accelerator(train.accelerator)
    processes = count_processes_per_node(accelerator, train.devices, train.strategy)
    precision = train.precision or ("32-true" if accelerator == "cpu" else "16-mixed")
    pin_memory = accelerator == "gpu" if train.pin_memory is None else train.pin_memory
    if train.num_workers is None:
        num_workers = max(1, (os.cpu_count() or 1) // processes)
    else:
        num_workers = train.num_workers
    return TrainSettings(
        accelerator=accelerator,
        precision=precision,
        pin_memory=pin_memory,
        num_workers=num_workers,
        processes_per_node=processes,
        world_size=processes * train.num_nodes,
    )


BF16_PRECISIONS = ("bf16-mixed", "bf16-true", "16-mixed")
"""Precisions that compute in bfloat16 on a CPU (Lightning runs ``16-mixed`` there as
``bf16-mixed``)."""


def cpu_has_native_bf16() -> bool:
    """Whether this CPU has bfloat16 instructions torch uses (AVX512-BF16 or AMX).

    With them, ``bf16-mixed`` trains faster than ``32-true`` (``benchmarks/bench_recipe_speed.py``
    measures by how much); without them torch emulates bfloat16, which is slower than float32.
    """
    import torch

    probes = ("_is_avx512_bf16_supported", "_is_amx_tile_supported")
    return any(bool(getattr(torch.cpu, name, lambda: False)()) for name in probes)


def precision_hint(settings: TrainSettings, native_bf16: bool | None = None) -> str | None:
    """A warning for bfloat16 training on a CPU that only emulates it (``None`` otherwise).

    Args:
        settings: The resolved settings of the run.
        native_bf16: Whether the CPU has bfloat16 instructions (``None``: ask this CPU).
    """
    if settings.accelerator != "cpu" or settings.precision not in BF16_PRECISIONS:
        return None
    if native_bf16 is None:
        native_bf16 = cpu_has_native_bf16()
    if native_bf16:
        return None
    return (
        f"TRAIN_CONFIG.precision: {settings.precision} on a CPU without bfloat16 instructions "
        "(AVX512-BF16 or AMX): torch emulates bfloat16 here, which trains slower than float32 "
        "and fits fewer epochs into a time budget; set TRAIN_CONFIG.precision: 32-true "
        "(--set TRAIN_CONFIG.precision=32-true)"
    )


def config_with_resolved(
    cfg: ExperimentConfig, settings: TrainSettings | None = None
) -> dict[str, object]:
    """``cfg`` as written (automatic values ``None``) and, under ``RESOLVED``, what they resolve
    to here (``settings``, else resolved now): what a run's ``config.yaml`` and MLflow hold."""
    settings = settings or resolve_train_settings(cfg.train)
    return {**cfg.to_yaml_dict(), RESOLVED_KEY: settings.as_dict()}
