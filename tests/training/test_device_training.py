"""``TRAIN_CONFIG.augment_on: device`` end to end through ``skinet train`` (CPU tensors)."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml

from skinet.cli.main import main

REPO = Path(__file__).resolve().parents[2]


def test_cli_train_with_device_augmentation(
    tiny_raw: dict[str, Any], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    tiny_raw["TRAIN_CONFIG"].update({"augment_on": "device", "use_mlflow_logger": False})
    recipe = yaml.safe_load((REPO / "configs" / "transforms_robust.yaml").read_text())
    tiny_raw["TRANSFORM_CONFIG"] = recipe["TRANSFORM_CONFIG"]
    config = tmp_path / "device.yaml"
    config.write_text(yaml.safe_dump(tiny_raw))
    with caplog.at_level(logging.INFO, logger="skinet.training.data.device_split"):
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


DDP_SCRIPT = textwrap.dedent(
    """
    import json, sys
    import lightning as L
    import torch.distributed as dist
    from skinet.config.experiment import parse_config
    from skinet.training.data.loaders import build_dataloaders
    from skinet.training.lightning_model import LightningModel

    class RecordShards(L.Callback):
        def on_train_epoch_start(self, trainer, module):
            sampler = trainer.train_dataloader.sampler
            shard = [int(i) for i in sampler]
            shards = [None] * trainer.world_size
            dist.all_gather_object(shards, shard)
            self.record = {"sampler": type(sampler).__name__, "shards": shards,
                           "on_device": module.device_split is not None}

    cfg = parse_config(json.loads(sys.argv[1]))
    loaders = build_dataloaders(cfg, world_size=2)
    recorder = RecordShards()
    trainer = L.Trainer(accelerator="cpu", strategy="ddp", devices=2, max_epochs=1,
                        logger=False, enable_progress_bar=False, enable_checkpointing=False,
                        num_sanity_val_steps=0, callbacks=[recorder])
    trainer.fit(LightningModel(cfg.to_yaml_dict()), loaders.train, loaders.val)
    if dist.get_rank() == 0:
        print("RECORD=" + json.dumps(recorder.record))
    """
)


@pytest.mark.heavy
def test_ddp_ranks_draw_disjoint_shards_of_indices(
    tiny_raw: dict[str, Any], tmp_path: Path
) -> None:
    tiny_raw["TRAIN_CONFIG"].update({"augment_on": "device", "use_mlflow_logger": False})
    tiny_raw["TRAIN_CONFIG"]["batch_size"] = 2
    script = tmp_path / "ddp_device.py"
    script.write_text(DDP_SCRIPT)
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in {"LOCAL_RANK", "RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "NODE_RANK"}
        and not k.startswith("PL_")
    }
    proc = subprocess.run(
        [sys.executable, str(script), json.dumps(tiny_raw)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    line = next(x for x in proc.stdout.splitlines() if x.startswith("RECORD="))
    record = json.loads(line.removeprefix("RECORD="))
    assert record["sampler"] == "DistributedSampler" and record["on_device"]
    first, second = record["shards"]
    assert not set(first) & set(second) and sorted(first + second) == list(range(8))
