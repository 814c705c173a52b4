"""SystemMetricsThreadCallback with a real Trainer: CPU/RAM only on a machine without GPU."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

import pytest
import torch
from lightning.pytorch.loggers import CSVLogger

from skinet.training.callbacks.system_metrics import SystemMetricsThreadCallback, _init_nvml


def read_columns(logger: CSVLogger) -> dict[str, list[float]]:
    with (Path(logger.log_dir) / "metrics.csv").open() as f:
        rows = list(csv.DictReader(f))
    return {k: [float(r[k]) for r in rows if r.get(k)] for k in (rows[0] if rows else {})}


def test_thread_logs_cpu_and_ram_and_stops(
    tmp_path: Path, seg_model_cls: Any, loaders: Any, trainer_factory: Any
) -> None:
    callback = SystemMetricsThreadCallback(interval_sec=0.02)
    logger = CSVLogger(tmp_path, name="csv")
    trainer = trainer_factory([logger], [callback], max_steps=3)
    trainer.fit(seg_model_cls(step_sleep_s=0.05), *loaders)

    assert callback.thread is not None and not callback.thread.is_alive()
    columns = read_columns(logger)
    assert columns["system/cpu_percent"] and columns["system/ram_percent"]
    assert all(0.0 <= v <= 100.0 for v in columns["system/cpu_percent"])
    assert all(0.0 < v <= 100.0 for v in columns["system/ram_percent"])
    assert all(v > 0 for v in columns["system/process_rss_mb"])
    if not torch.cuda.is_available():
        assert not [k for k in columns if k.startswith("system/gpu")]


def test_thread_stops_when_fit_raises(
    tmp_path: Path, seg_model_cls: Any, loaders: Any, trainer_factory: Any
) -> None:
    callback = SystemMetricsThreadCallback(interval_sec=0.02)
    trainer = trainer_factory([CSVLogger(tmp_path, name="csv")], [callback], max_steps=3)
    with pytest.raises(RuntimeError, match="boom"):
        trainer.fit(seg_model_cls(fail_at_step=1, step_sleep_s=0.05), *loaders)
    assert callback.thread is not None and not callback.thread.is_alive()


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without NVIDIA driver")
def test_nvml_without_driver_is_silent() -> None:
    assert _init_nvml(torch.device("cuda", 0)) is None


def test_rejects_bad_interval() -> None:
    with pytest.raises(ValueError, match="interval_sec"):
        SystemMetricsThreadCallback(interval_sec=0)
