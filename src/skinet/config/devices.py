"""Which hardware ``TRAIN_CONFIG`` trains on and how many processes its strategy starts.

These mirror Lightning's own choices (its ``_AcceleratorConnector``) as plain functions, so a
config validates on a machine without the devices it names and without initialising CUDA:
only ``torch.cuda.is_available``, ``torch.cuda.device_count`` and
``torch.backends.mps.is_available`` are asked, and only when the answer matters.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

ResolvedAccelerator = Literal["cpu", "gpu", "mps"]
DeviceSpec = int | list[int] | str

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


def parse_device_spec(devices: DeviceSpec) -> int | list[int] | Literal["auto"]:
    """``devices`` as Lightning reads it: ``"auto"``, a count (``-1`` = all) or device indices.

    Strings follow Lightning: ``"2"`` is a count, ``"0,1"`` and ``"1,"`` are indices.

    Raises:
        ValueError: ``devices`` is none of these (a bool, an empty or non-integer string, a
            count below -1).
    """
    if isinstance(devices, bool):
        raise ValueError(f"devices must be an int, a list of ints or a string, got {devices!r}")
    if isinstance(devices, list):
        return [int(d) for d in devices]
    if isinstance(devices, str):
        text = devices.strip()
        if text == "auto":
            return "auto"
        try:
            if "," in text:
                return [int(d) for d in text.split(",") if d.strip()]
            count = int(text)
        except ValueError:
            raise ValueError(
                f"devices {devices!r} is not 'auto', a count such as '2' (-1 = all) or a list "
                "of device indices such as '0,1'"
            ) from None
    else:
        count = int(devices)
    if count < -1:
        raise ValueError(f"devices must be -1 (all), 0 or more, got {count}")
    return count


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
