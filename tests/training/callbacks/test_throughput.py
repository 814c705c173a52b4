"""ThroughputCallback with a real Trainer and a patched clock."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

import pytest
import torch
from lightning.pytorch.loggers import CSVLogger

from skinet.training.callbacks import throughput
from skinet.training.callbacks.throughput import ThroughputCallback, batch_size_of


def read_metric(csv_path: Path, name: str) -> dict[int, float]:
    """step -> value of one metric in a CSVLogger file."""
    with csv_path.open() as f:
        return {int(row["step"]): float(row[name]) for row in csv.DictReader(f) if row.get(name)}


def test_logs_exact_per_step_values(
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    seg_model_cls: Any,
    loaders: Any,
    trainer_factory: Any,
) -> None:
    # Calls: epoch 0 batch 0 start+end, batch 1 end, (validation), epoch 1 batch 0 start+end.
    clock = iter([0.0, 0.5, 1.5, 10.0, 10.25])
    monkeypatch.setattr(throughput, "perf_counter", lambda: next(clock))
    logger = CSVLogger(tmp_path, name="csv")
    trainer = trainer_factory([logger], [ThroughputCallback()], max_steps=3)
    trainer.fit(seg_model_cls(), *loaders)

    csv_path = Path(logger.log_dir) / "metrics.csv"
    # batch size 4: 4 / 0.5 s, 4 / 1.0 s, 4 / 0.25 s (validation time is left out)
    assert read_metric(csv_path, "perf/samples_per_sec") == pytest.approx({0: 8.0, 1: 4.0, 2: 16.0})
    assert read_metric(csv_path, "perf/time_per_step_ms") == pytest.approx(
        {0: 500.0, 1: 1000.0, 2: 250.0}
    )


@pytest.mark.parametrize(
    ("batch", "expected"),
    [
        ((torch.zeros(5, 3, 8, 8), torch.zeros(5, 1, 8, 8)), 5),
        ([torch.zeros(2, 3, 8, 8), torch.zeros(2, 1, 8, 8)], 2),
        ({"image": torch.zeros(3, 3, 8, 8)}, 3),
        (torch.zeros(7, 3, 8, 8), 7),
        ("not a batch", 0),
    ],
)
def test_batch_size_of(batch: Any, expected: int) -> None:
    assert batch_size_of(batch) == expected
