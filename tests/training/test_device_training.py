"""``TRAIN_CONFIG.augment_on: device`` end to end through ``skinet train`` (CPU tensors)."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest
import yaml

from skinet.cli import main

REPO = Path(__file__).resolve().parents[2]


def test_cli_train_with_device_augmentation(
    tiny_raw: dict[str, Any], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    tiny_raw["TRAIN_CONFIG"].update({"augment_on": "device", "use_mlflow_logger": False})
    recipe = yaml.safe_load((REPO / "configs" / "transforms_robust.yaml").read_text())
    tiny_raw["TRANSFORM_CONFIG"] = recipe["TRANSFORM_CONFIG"]
    config = tmp_path / "device.yaml"
    config.write_text(yaml.safe_dump(tiny_raw))
    with caplog.at_level(logging.INFO, logger="skinet.data.device_split"):
        code = main(["train", "--config", str(config), "--no-visualize"])
    assert code == 0
    # The split went to the module's device once the Trainer ran, and training batches came
    # from it (8 samples, batch 4: 2 steps per epoch, 2 epochs).
    assert any("training split on cpu: 8 samples" in r.getMessage() for r in caplog.records)
    (run_dir,) = (tmp_path / "runs").iterdir()
    summary = json.loads((run_dir / "metrics.json").read_text())
    assert 0.0 <= summary["metrics"]["test_dice"] <= 1.0
    assert summary["epochs_trained"] == 2
    saved = yaml.safe_load((run_dir / "config.yaml").read_text())
    assert saved["TRAIN_CONFIG"]["augment_on"] == "device"
