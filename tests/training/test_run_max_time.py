"""``TRAIN_CONFIG.max_time``: validated when the config loads, and a real wall-clock stop."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from lightning.pytorch.callbacks import Timer

from skinet.config.errors import ConfigError
from skinet.config.experiment import parse_config
from skinet.config.train import parse_max_time
from skinet.runtime.devices import resolve_train_settings
from skinet.training.run import build_trainer, run_training


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("00:00:15:00", timedelta(minutes=15)),
        ("01:02:03:04", timedelta(days=1, hours=2, minutes=3, seconds=4)),
        ({"minutes": 15}, timedelta(minutes=15)),
        ({"hours": 1, "seconds": 30}, timedelta(hours=1, seconds=30)),
    ],
)
def test_max_time_formats(value, expected) -> None:
    cfg = parse_config({"TRAIN_CONFIG": {"max_time": value}})
    assert cfg.train.max_time == value
    assert parse_max_time(value) == expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("15:00", "is not a duration: use 'DD:HH:MM:SS'"),
        ("00:00:15", "is not a duration"),
        ("00:00:1:00", "is not a duration"),
        ("fifteen minutes", "is not a duration"),
        ({"mins": 15}, "unknown time unit(s) ['mins']"),
        ({"minutes": -1}, "must be >= 0"),
        ("00:00:00:00", "longer than 0 seconds"),
        ({"minutes": "a lot"}, "TRAIN_CONFIG.max_time"),
        (216000, "write the duration as a quoted string"),  # YAML's reading of 1:00:00:00
    ],
)
def test_bad_max_time_is_a_config_error(value, expected) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config({"TRAIN_CONFIG": {"max_time": value}})
    assert "TRAIN_CONFIG.max_time" in str(info.value)
    assert expected in str(info.value)


def test_max_time_reaches_the_trainer(tiny_config, tmp_path: Path) -> None:
    cfg = tiny_config.model_copy(deep=True)
    cfg.train.max_time = "00:01:30:00"
    trainer = build_trainer(cfg, resolve_train_settings(cfg.train), tmp_path, [], [], True)
    timers = [c for c in trainer.callbacks if isinstance(c, Timer)]  # type: ignore[attr-defined]
    assert len(timers) == 1 and timers[0]._duration == 5400
    settings = resolve_train_settings(tiny_config.train)
    untimed = build_trainer(tiny_config, settings, tmp_path, [], [], True)
    assert not any(isinstance(c, Timer) for c in untimed.callbacks)  # type: ignore[attr-defined]


def test_max_time_stops_a_run(tiny_raw: dict[str, Any]) -> None:
    tiny_raw["TRAIN_CONFIG"].update(
        max_epochs=500, max_time={"seconds": 2}, use_early_stopping=False, use_mlflow_logger=False
    )
    result = run_training(parse_config(tiny_raw), visualize=False)
    assert 1 <= result.epochs_trained < 500
    assert result.fit_seconds < 60
    assert result.best_checkpoint is not None and result.best_checkpoint.is_file()
