"""train_and_evaluate end to end: metrics, reproducibility, resume, the CLI and DDP."""

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
import torch
import yaml

from skinet.cli.main import main
from skinet.config.experiment import parse_config
from skinet.keys import MetricsKey
from skinet.training.resume import ResumeError
from skinet.training.run import run_training, train_and_evaluate

REPO = Path(__file__).resolve().parents[2]


def _offline(raw: dict[str, Any], **train: Any) -> dict[str, Any]:
    raw["TRAIN_CONFIG"].update({"use_mlflow_logger": False, **train})
    return raw


def test_train_and_evaluate_returns_val_and_test_metrics(tiny_raw: dict[str, Any]) -> None:
    result = run_training(parse_config(tiny_raw), visualize=True)
    metrics = result.metrics
    assert 0.0 <= metrics["val_best_dice_at_threshold"] <= 1.0
    for name in ("test_dice", "test_iou", "test_mean_dice_per_image", "test_mean_iou_per_image"):
        assert 0.0 <= metrics[name] <= 1.0
    assert result.best_checkpoint is not None and result.best_checkpoint.is_file()
    assert (result.run_dir / "config.yaml").is_file()
    assert (result.run_dir / "augmented_samples.png").is_file()
    summary = json.loads((result.run_dir / "metrics.json").read_text())
    assert summary["metrics"]["test_dice"] == metrics["test_dice"]
    checkpoint = torch.load(result.best_checkpoint, map_location="cpu", weights_only=False)
    assert checkpoint["skinet"]["config"]["MODEL_CONFIG"]["out_channels_layer1"] == 8
    assert checkpoint["skinet"]["val_optimal_threshold"] is not None


def test_same_seed_gives_identical_metrics(tiny_raw: dict[str, Any]) -> None:
    raw = _offline(tiny_raw)
    first = train_and_evaluate(parse_config(raw), visualize=False)
    second = train_and_evaluate(parse_config(raw), visualize=True)

    def model_metrics(metrics: dict[str, float]) -> dict[str, float]:
        return {k: v for k, v in metrics.items() if not k.startswith(("perf/", "system/"))}

    assert "val_best_dice_at_threshold" in model_metrics(first)
    assert model_metrics(first) == model_metrics(second)


def test_resume_continues_from_the_checkpoint_epoch(
    tiny_raw: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    raw = _offline(tiny_raw, max_epochs=1, use_early_stopping=False)
    first = run_training(parse_config(raw), visualize=False)
    last = first.run_dir / "checkpoints" / "last.ckpt"
    assert last.is_file()

    raw["TRAIN_CONFIG"]["max_epochs"] = 3
    caplog.set_level(logging.INFO, logger="skinet.progress")
    caplog.clear()
    resumed = run_training(parse_config(raw), visualize=False, resume="last")
    trained = [
        r.getMessage().split(" done")[0] for r in caplog.records if " done: " in r.getMessage()
    ]
    assert trained == ["epoch 2/3", "epoch 3/3"]  # a fresh start would train epoch 1 again
    assert resumed.run_dir == first.run_dir
    assert resumed.epochs_trained == 3
    checkpoint = torch.load(last, map_location="cpu", weights_only=False)
    assert checkpoint["epoch"] == 2
    assert checkpoint["optimizer_states"] and checkpoint["lr_schedulers"]


def test_resume_continues_the_same_mlflow_run(tiny_raw: dict[str, Any]) -> None:
    from mlflow.tracking import MlflowClient

    from skinet.tracking.mlflow_utils import resolve_tracking_uri

    tiny_raw["TRAIN_CONFIG"].update({"max_epochs": 1, "use_early_stopping": False})
    first = run_training(parse_config(tiny_raw), visualize=False)
    tiny_raw["TRAIN_CONFIG"]["max_epochs"] = 2
    cfg = parse_config(tiny_raw)
    resumed = run_training(cfg, visualize=False, resume="last")

    assert resumed.mlflow_run_id == first.mlflow_run_id
    assert resumed.run_name == first.run_name
    client = MlflowClient(resolve_tracking_uri(cfg))
    history = client.get_metric_history(first.mlflow_run_id, "val_best_dice_at_threshold")
    assert len(history) == 2
    assert client.get_run(first.mlflow_run_id).info.status == "FINISHED"


def test_resume_past_max_epochs_is_a_clear_error(tiny_raw: dict[str, Any]) -> None:
    raw = _offline(tiny_raw, max_epochs=2, use_early_stopping=False)
    first = run_training(parse_config(raw), visualize=False)
    raw["TRAIN_CONFIG"]["max_epochs"] = 2
    with pytest.raises(ResumeError, match=r"already trained 2 epoch\(s\).*max_epochs above 2"):
        train_and_evaluate(parse_config(raw), resume=first.run_dir / "checkpoints" / "last.ckpt")
    with pytest.raises(FileNotFoundError, match="resume from not found"):
        train_and_evaluate(parse_config(raw), resume=first.run_dir / "nope.ckpt")


def test_cli_train_prints_a_summary(tiny_raw: dict[str, Any], tmp_path: Path, capsys) -> None:
    config = tmp_path / "tiny.yaml"
    config.write_text(yaml.safe_dump(_offline(tiny_raw)))
    code = main(["train", "--config", str(config), "--set", "TRAIN_CONFIG.max_epochs=1"])
    out = capsys.readouterr().out
    assert code == 0
    assert "test_dice" in out and "best checkpoint" in out


DDP_SCRIPT = textwrap.dedent(
    """
    import json, os, sys
    import lightning as L
    import torch
    import torch.distributed as dist
    from skinet.config.experiment import parse_config
    from skinet.runtime.devices import resolve_train_settings
    from skinet.runtime.rank import release_process_group
    from skinet.training.data.loaders import build_dataloaders
    from skinet.training.lightning_model import LightningModel
    from skinet.training.reproducibility import configure_reproducibility
    from skinet.training.run import train_and_evaluate

    class CountImages(L.Callback):
        # Images scored per stage, summed over ranks: each image once means the split's size.
        def __init__(self):
            self.seen = {"val": 0, "test": 0}

        def on_validation_batch_end(self, trainer, module, outputs, batch, *args):
            self.seen["val"] += len(batch[0])

        def on_test_batch_end(self, trainer, module, outputs, batch, *args):
            self.seen["test"] += len(batch[0])

        def total(self, trainer, stage):
            seen = torch.tensor(float(self.seen[stage]))
            return int(trainer.strategy.reduce(seen, reduce_op="sum"))

    raw, mode = json.loads(sys.argv[1]), sys.argv[2]
    cfg = parse_config(raw)
    if mode == "validate":
        # Same seed, same initial weights: only the metric aggregation differs between runs.
        configure_reproducibility(cfg)
        world_size = resolve_train_settings(cfg.train).processes_per_node
        loaders = build_dataloaders(cfg, world_size=world_size)
        model = LightningModel(cfg.to_yaml_dict())
        counter = CountImages()
        trainer = L.Trainer(accelerator="cpu", strategy=cfg.train.strategy,
                            devices=cfg.train.devices, logger=False, enable_progress_bar=False,
                            callbacks=[counter])
        trainer.validate(model, loaders.val, verbose=False)
        metrics = {k: float(v) for k, v in trainer.callback_metrics.items()}
        trainer.test(model, loaders.test, verbose=False)
        metrics.update({k: float(v) for k, v in trainer.callback_metrics.items()})
        metrics["val_images_seen"] = counter.total(trainer, "val")
        metrics["test_images_seen"] = counter.total(trainer, "test")
        rank = dist.get_rank() if dist.is_initialized() else 0
        release_process_group()
    else:
        rank = int(os.environ.get("LOCAL_RANK", "0"))
        metrics = train_and_evaluate(cfg, visualize=False)
        # The run closes its process group: a gloo group left open can abort at exit.
        metrics["process_group_open"] = float(dist.is_initialized())
    if rank == 0:
        print("METRICS=" + json.dumps(metrics))
    """
)


def _run_script(raw: dict[str, Any], tmp_path: Path, mode: str) -> dict[str, float]:
    script = tmp_path / "ddp_run.py"
    script.write_text(DDP_SCRIPT)
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in {"LOCAL_RANK", "RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "NODE_RANK"}
        and not k.startswith("PL_")
    }
    proc = subprocess.run(
        [sys.executable, str(script), json.dumps(raw), mode],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    line = next(x for x in proc.stdout.splitlines() if x.startswith("METRICS="))
    return json.loads(line.removeprefix("METRICS="))


@pytest.mark.heavy
def test_ddp_validation_sums_counts_across_ranks(tiny_raw: dict[str, Any], tmp_path: Path) -> None:
    raw = _offline(tiny_raw)
    single = _run_script(raw, tmp_path, "validate")
    raw["TRAIN_CONFIG"].update({"strategy": "ddp", "devices": 2})
    ddp = _run_script(raw, tmp_path, "validate")
    for name in ("val_best_dice_at_threshold", "val_mean_dice_per_image", "val_optimal_threshold"):
        assert ddp[name] == pytest.approx(single[name], abs=1e-6), name


@pytest.mark.process
def test_ddp_metrics_count_each_image_once_on_odd_splits(tmp_path: Path) -> None:
    from tests.helpers.config import tiny_raw_config

    from skinet.datasets.synthetic import make_synthetic_dataset

    root = tmp_path / "odd"
    make_synthetic_dataset(root, num_train=4, num_val=5, num_test=3, image_size=32, seed=1)
    # One image per forward pass: every probability is bitwise the same in both runs, so the
    # summed counts (and metrics computed from them) must agree exactly.
    raw = _offline(tiny_raw_config(tmp_path, root), batch_size=1)
    single = _run_script(raw, tmp_path, "validate")
    raw["TRAIN_CONFIG"].update({"strategy": "ddp", "devices": 2})
    ddp = _run_script(raw, tmp_path, "validate")

    assert (ddp["val_images_seen"], ddp["test_images_seen"]) == (5, 3)
    exact = ("val_dice", "val_iou", "val_best_dice_at_threshold", "val_optimal_threshold")
    for name in (*exact, "test_dice", "test_iou"):
        assert ddp[name] == single[name], name
    for name in ("val_loss", "val_mean_dice_per_image", "val_mean_iou_per_image", "test_loss"):
        assert ddp[name] == pytest.approx(single[name], abs=1e-6), name
    for name in ("test_mean_dice_per_image", "test_mean_iou_per_image"):
        assert ddp[name] == pytest.approx(single[name], abs=1e-6), name


def test_a_process_group_the_caller_opened_stays_open(
    tiny_raw: dict[str, Any], tmp_path: Path
) -> None:
    import torch.distributed as dist

    store = f"file://{tmp_path / 'store'}"
    dist.init_process_group("gloo", init_method=store, rank=0, world_size=1)
    try:
        result = run_training(parse_config(_offline(tiny_raw, max_epochs=1)), visualize=False)
        assert result.best_checkpoint is not None
        assert dist.is_initialized()  # the caller's group, still usable after the run
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


@pytest.mark.heavy
def test_ddp_two_cpu_processes_train_end_to_end(tiny_raw: dict[str, Any], tmp_path: Path) -> None:
    raw = _offline(tiny_raw, max_epochs=1, strategy="ddp", devices=2)
    metrics = _run_script(raw, tmp_path, "train")
    assert 0.0 <= metrics["test_dice"] <= 1.0
    assert metrics["process_group_open"] == 0.0
    assert "val_best_dice_at_threshold" in metrics


def test_cli_train_fails_fast_on_unreachable_tracking_server(
    tiny_raw: dict[str, Any], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from skinet.tracking.server import find_free_port

    tiny_raw["TRAIN_CONFIG"]["mlflow_config"] = {
        "tracking_uri": f"http://127.0.0.1:{find_free_port()}"
    }
    config = tmp_path / "unreachable.yaml"
    config.write_text(yaml.safe_dump(tiny_raw))
    assert main(["train", "--config", str(config)]) == 1
    assert "does not answer" in caplog.text
    assert not (tmp_path / "runs").exists()  # nothing half-made is left behind


def test_a_run_on_a_few_images_logs_its_steps_without_lightnings_warning(
    tiny_raw: dict[str, Any], recwarn: pytest.WarningsRecorder
) -> None:
    """Fewer training batches than ``log_every_n_steps`` (a clinic's 40 images): the interval
    is capped at one epoch's batches, so the step metrics (throughput) are logged every epoch
    and nothing warns."""
    tiny_raw["TRAIN_CONFIG"].update(max_epochs=1, log_every_n_steps=50)
    result = run_training(parse_config(tiny_raw), visualize=False)
    assert not [w for w in recwarn if "smaller than the logging interval" in str(w.message)]
    from mlflow.tracking import MlflowClient

    from skinet.tracking.mlflow_utils import resolve_tracking_uri

    client = MlflowClient(resolve_tracking_uri(parse_config(tiny_raw)))
    assert client.get_metric_history(result.mlflow_run_id, MetricsKey.SAMPLES_PER_SEC.value)
