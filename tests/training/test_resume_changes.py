"""What a resume does with a changed config, and where a second run of one name writes.

Real tiny runs (CPU, no MLflow): a resume either applies a change or refuses it by name before
touching the run; a cosine that ended with the run stretches to the new ``max_epochs``.
"""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path
from typing import Any

import pytest
import torch

from skinet.config.experiment import load_config, parse_config
from skinet.training.resume import ResumeError
from skinet.training.run import run_training


def _offline(raw: dict[str, Any], **train: Any) -> dict[str, Any]:
    raw["TRAIN_CONFIG"].update({"use_mlflow_logger": False, "use_early_stopping": False, **train})
    return raw


def _last(run_dir: Path) -> dict[str, Any]:
    return torch.load(run_dir / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)


def test_resume_refuses_each_change_it_would_not_apply(tiny_raw: dict[str, Any]) -> None:
    raw = _offline(tiny_raw, max_epochs=1)
    run = run_training(parse_config(raw), visualize=False).run_dir
    saved_config = (run / "config.yaml").read_text()
    changes = {
        "DATA_CONFIG.reduced_jpeg_decode": (
            False,
            "DATA_CONFIG.reduced_jpeg_decode: True -> False",
        ),
        "DATA_CONFIG.max_samples_per_split": (4, "DATA_CONFIG.max_samples_per_split: null -> 4"),
        "TRAIN_CONFIG.dice_reduction": ("image", "TRAIN_CONFIG.dice_reduction: batch -> image"),
        "TRAIN_CONFIG.checkpoint_config": (
            {"select": "last"},
            "TRAIN_CONFIG.checkpoint_config.select: best -> last",
        ),
        # lr_scheduler_config.mode follows SWEEP_CONFIG.direction
        "SWEEP_CONFIG.direction": ("minimize", "TRAIN_CONFIG.lr_scheduler_config.mode: max -> min"),
    }
    for key, (value, named) in changes.items():
        section, field = key.split(".")
        changed = json.loads(json.dumps(raw))
        changed[section][field] = value
        changed["TRAIN_CONFIG"]["max_epochs"] = 2
        with pytest.raises(ResumeError, match=named.replace(".", r"\.")) as refused:
            run_training(parse_config(changed), visualize=False, resume="last")
        assert "--init-from" in str(refused.value)
    assert (run / "config.yaml").read_text() == saved_config
    assert _last(run)["epoch"] == 0


def test_resume_applies_a_new_plateau_min_lr(tiny_raw: dict[str, Any]) -> None:
    raw = _offline(
        tiny_raw, max_epochs=1, use_lr_scheduler=True, scheduler_type="reduce_on_plateau"
    )
    run = run_training(parse_config(raw), visualize=False).run_dir
    raw["TRAIN_CONFIG"].update({"max_epochs": 2, "lr_scheduler_config": {"min_lr": 0.01}})
    run_training(parse_config(raw), visualize=False, resume="last")
    (scheduler,) = _last(run)["lr_schedulers"]
    assert scheduler["min_lrs"] == [0.01]


def _lr_at_epoch_start(run_dir: Path) -> dict[int, float]:
    state = next(v for k, v in _last(run_dir)["callbacks"].items() if k.startswith("EpochMetrics"))
    return {int(epoch): lr for epoch, lr in state["learning_rates"].items()}


def test_a_cosine_resumed_with_its_own_config_and_more_epochs_stretches(
    tiny_raw: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    """The run's config.yaml records T_max = 1 (from max_epochs 1); resumed with max_epochs 2,
    the learning rate follows the 2-epoch cosine the uninterrupted run follows."""
    cosine = {"use_lr_scheduler": True, "scheduler_type": "cosine_annealing"}
    raw = _offline(tiny_raw, max_epochs=1, **cosine)
    first = run_training(parse_config(raw), visualize=False).run_dir
    assert "T_max: 1" in (first / "config.yaml").read_text()
    own = load_config(first / "config.yaml", {"TRAIN_CONFIG.max_epochs": 2})
    with caplog.at_level(logging.INFO, logger="skinet.training.plan"):
        run_training(own, visualize=False, resume=first / "checkpoints" / "last.ckpt")
    assert "T_max 1 -> 2" in caplog.text

    whole = _offline(json.loads(json.dumps(tiny_raw)), max_epochs=2, **cosine)
    uninterrupted = run_training(parse_config(whole), visualize=False).run_dir
    lr, eta_min = 1e-3, 1e-6
    halfway = eta_min + (lr - eta_min) * (1 + math.cos(math.pi / 2)) / 2
    assert _lr_at_epoch_start(uninterrupted)[1] == pytest.approx(halfway)
    assert _lr_at_epoch_start(first)[1] == pytest.approx(halfway)
    resumed, reference = _last(first), _last(uninterrupted)
    assert resumed["lr_schedulers"][0]["T_max"] == reference["lr_schedulers"][0]["T_max"] == 2
    assert resumed["optimizer_states"][0]["param_groups"][0]["lr"] == pytest.approx(
        reference["optimizer_states"][0]["param_groups"][0]["lr"]
    )
    assert "T_max: 2" in (first / "config.yaml").read_text()


def test_a_second_run_of_the_same_name_gets_its_own_folder(
    tiny_raw: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    raw = _offline(tiny_raw, max_epochs=1)
    raw["TRAIN_CONFIG"]["mlflow_config"] = {"run_name": "baseline"}
    first = run_training(parse_config(raw), visualize=False)
    metrics = (first.run_dir / "metrics.json").read_text()
    checkpoint = (first.run_dir / "checkpoints" / "last.ckpt").read_bytes()
    second = run_training(parse_config(raw), visualize=False)

    assert first.run_dir.name == "baseline"
    assert second.run_dir == first.run_dir.with_name("baseline-2")
    assert (second.run_dir / "metrics.json").is_file()
    assert (first.run_dir / "metrics.json").read_text() == metrics
    assert (first.run_dir / "checkpoints" / "last.ckpt").read_bytes() == checkpoint
    assert "already holds an earlier run" in caplog.text and "baseline-2" in caplog.text
    # A resume still continues the folder it names.
    raw["TRAIN_CONFIG"]["max_epochs"] = 2
    resumed = run_training(
        parse_config(raw), visualize=False, resume=first.run_dir / "checkpoints" / "last.ckpt"
    )
    assert resumed.run_dir == first.run_dir


def test_a_checkpoint_of_the_earlier_layout_still_draws_its_epochs(
    tiny_raw: dict[str, Any],
) -> None:
    """Earlier checkpoints kept train metrics, learning rates and sweeps in the plots callback's
    state; a resume takes them into the epoch history."""
    raw = _offline(tiny_raw, max_epochs=1)
    run = run_training(parse_config(raw), visualize=False).run_dir
    path = run / "checkpoints" / "last.ckpt"
    checkpoint = torch.load(path, map_location="cpu", weights_only=False)
    key = next(k for k in checkpoint["callbacks"] if k.startswith("EpochMetrics"))
    state = checkpoint["callbacks"][key]
    checkpoint["callbacks"]["TrainingPlotsCallback"] = {
        "history": {"train_loss": {0: state["train"]["0"]["train_loss"]}},
        "learning_rates": {0: state["learning_rates"]["0"]},
        "thresholds_used": {0: state["thresholds"]["0"]},
        "threshold_results": {0: state["sweeps"]["0"]},
    }
    checkpoint["callbacks"][key] = {"history": state["history"]}
    torch.save(checkpoint, path)

    raw["TRAIN_CONFIG"]["max_epochs"] = 2
    run_training(parse_config(raw), visualize=False, resume=path)
    resumed = next(v for k, v in _last(run)["callbacks"].items() if k.startswith("EpochMetrics"))
    assert sorted(resumed["train"]) == sorted(resumed["learning_rates"]) == ["0", "1"]
    assert sorted(resumed["sweeps"]) == sorted(resumed["thresholds"]) == ["0", "1"]
