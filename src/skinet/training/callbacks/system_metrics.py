"""CPU, RAM and GPU usage sampled by a background thread during ``fit``."""

from __future__ import annotations

import logging
import threading
from typing import Any

import lightning as L
import psutil
import torch
from lightning.pytorch.callbacks import Callback

log = logging.getLogger(__name__)


class SystemMetricsThreadCallback(Callback):
    """Sample system usage every ``interval_sec`` seconds on a daemon thread while fitting.

    Lightning's ``DeviceStatsMonitor`` samples inside the training loop, so it sees nothing
    while the loop waits on the DataLoader, and it reads no GPU utilisation; a thread with a
    fixed period does both. Logged through every logger of the trainer at
    ``trainer.global_step``:

    - ``system/cpu_percent``, ``system/ram_percent``, ``system/process_rss_mb``: always;
    - ``system/gpu_mem_allocated_mb``, ``system/gpu_mem_reserved_mb``: on CUDA (``torch.cuda``);
    - ``system/gpu_utilization``: on CUDA when NVML (``nvidia-ml-py``) finds a driver.

    Only global rank 0 samples. The thread starts at fit start and is stopped and joined at
    fit end, on an exception and at teardown.
    """

    def __init__(self, interval_sec: float = 5.0) -> None:
        if interval_sec <= 0:
            raise ValueError(f"interval_sec must be > 0, got {interval_sec}")
        self.interval_sec = interval_sec
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._warned = False

    @property
    def thread(self) -> threading.Thread | None:
        """The sampling thread of the current or last fit (``None`` before the first)."""
        return self._thread

    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if not trainer.is_global_zero or not trainer.loggers:
            return
        self._stop_thread()
        self._stop.clear()
        self._thread = threading.Thread(
            target=self._run, args=(trainer,), name="skinet-system-metrics", daemon=True
        )
        self._thread.start()

    def on_fit_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._stop_thread()

    def on_exception(
        self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException
    ) -> None:
        self._stop_thread()

    def teardown(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        self._stop_thread()

    def _stop_thread(self) -> None:
        self._stop.set()
        thread = self._thread
        if thread is not None and thread.is_alive() and thread is not threading.current_thread():
            thread.join(timeout=self.interval_sec + 10.0)

    def _run(self, trainer: L.Trainer) -> None:
        device = trainer.strategy.root_device
        cuda = device.type == "cuda" and torch.cuda.is_available()
        nvml_handle = _init_nvml(device) if cuda else None
        psutil.cpu_percent(interval=None)  # the first call only starts the measurement
        process = psutil.Process()
        try:
            while not self._stop.wait(self.interval_sec):
                metrics = {
                    "system/cpu_percent": psutil.cpu_percent(interval=None),
                    "system/ram_percent": psutil.virtual_memory().percent,
                    "system/process_rss_mb": process.memory_info().rss / 2**20,
                }
                if cuda:
                    metrics.update(_cuda_memory_mb(device))
                if nvml_handle is not None:
                    metrics.update(_gpu_utilization(nvml_handle))
                self._log(trainer, metrics)
        finally:
            if nvml_handle is not None:
                _shutdown_nvml()

    def _log(self, trainer: L.Trainer, metrics: dict[str, float]) -> None:
        with self._lock:
            try:
                for logger in trainer.loggers:
                    logger.log_metrics(metrics, step=trainer.global_step)
            except Exception as exc:  # noqa: BLE001 - monitoring must never stop training
                if not self._warned:
                    log.warning("system metrics could not be logged (%s); continuing", exc)
                    self._warned = True


def _cuda_memory_mb(device: torch.device) -> dict[str, float]:
    return {
        "system/gpu_mem_allocated_mb": torch.cuda.memory_allocated(device) / 2**20,
        "system/gpu_mem_reserved_mb": torch.cuda.memory_reserved(device) / 2**20,
    }


def _init_nvml(device: torch.device) -> Any | None:
    """An NVML handle of ``device``, or ``None`` when there is no NVIDIA driver or library."""
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:  # noqa: BLE001 - NVMLError_LibraryNotFound, DriverNotLoaded, ImportError
        return None
    index = device.index if device.index is not None else torch.cuda.current_device()
    try:
        # torch indices follow CUDA_VISIBLE_DEVICES, NVML's do not: match by UUID when possible.
        uuid = getattr(torch.cuda.get_device_properties(index), "uuid", None)
        if uuid is not None:
            return pynvml.nvmlDeviceGetHandleByUUID(f"GPU-{uuid}")
        return pynvml.nvmlDeviceGetHandleByIndex(index)
    except Exception:  # noqa: BLE001
        try:
            return pynvml.nvmlDeviceGetHandleByIndex(index)
        except Exception:  # noqa: BLE001
            _shutdown_nvml()
            return None


def _gpu_utilization(handle: Any) -> dict[str, float]:
    import pynvml

    try:
        return {"system/gpu_utilization": float(pynvml.nvmlDeviceGetUtilizationRates(handle).gpu)}
    except Exception:  # noqa: BLE001
        return {}


def _shutdown_nvml() -> None:
    try:
        import pynvml

        pynvml.nvmlShutdown()
    except Exception:  # noqa: BLE001
        pass
