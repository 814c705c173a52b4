"""Devices, processes per node and the accelerator a config resolves to (CUDA, MPS, CPU).

Machines this suite cannot run on (several GPUs, Apple silicon) are simulated by replacing
torch's availability functions: everything downstream of them is the real code.
"""

from __future__ import annotations

import lightning as L
import pytest
import torch

from skinet.config.errors import ConfigError
from skinet.config.experiment import parse_config
from skinet.runtime.devices import (
    count_processes_per_node,
    resolve_accelerator,
    resolve_train_settings,
)
from skinet.training.reproducibility import configure_reproducibility


def _no_gpu_count() -> int:
    raise AssertionError("the CUDA device count was asked although devices name the count")


# (resolved accelerator, devices, strategy, CUDA devices visible or None: must not be asked,
#  processes per node)
PROCESS_TABLE = [
    ("gpu", "auto", "auto", 4, 4),  # Lightning runs DDP itself for several devices
    ("gpu", "auto", "auto", 1, 1),
    ("gpu", "auto", "auto", 0, 1),
    ("gpu", 2, "auto", None, 2),
    ("gpu", 1, "auto", None, 1),
    ("gpu", [0, 2], "auto", None, 2),
    ("gpu", "0,1", "ddp", None, 2),
    ("gpu", "1,", "ddp", None, 1),
    ("gpu", "3", "ddp_spawn", None, 3),
    ("gpu", -1, "auto", 8, 8),
    ("gpu", "-1", "fsdp", 8, 8),
    ("gpu", "auto", "ddp_notebook", 2, 2),
    ("gpu", 2, "ddp_find_unused_parameters_true", None, 2),
    ("gpu", 2, "deepspeed_stage_2", None, 2),
    ("gpu", 4, "single_device", None, 1),
    ("cpu", "auto", "auto", None, 1),
    ("cpu", -1, "auto", None, 1),
    ("cpu", 2, "auto", None, 2),
    ("cpu", "2", "ddp", None, 2),
    ("mps", "auto", "auto", None, 1),
    ("mps", 1, "auto", None, 1),
]


@pytest.mark.parametrize(
    ("accelerator", "devices", "strategy", "visible", "expected"), PROCESS_TABLE
)
def test_processes_per_node(
    accelerator: str, devices: object, strategy: str, visible: int | None, expected: int
) -> None:
    gpu_count = _no_gpu_count if visible is None else (lambda: visible)
    assert count_processes_per_node(accelerator, devices, strategy, gpu_count) == expected  # type: ignore[arg-type]


def test_auto_strategy_on_several_gpus_divides_workers_and_sets_world_size(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("os.cpu_count", lambda: 16)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 4)
    one_node = resolve_train_settings(parse_config({"TRAIN_CONFIG": {"accelerator": "gpu"}}).train)
    assert (one_node.processes_per_node, one_node.world_size) == (4, 4)
    assert one_node.num_workers == 4
    two = parse_config({"TRAIN_CONFIG": {"devices": 2, "num_nodes": 2}}).train
    two_nodes = resolve_train_settings(two)
    assert (two_nodes.processes_per_node, two_nodes.world_size) == (2, 4)
    assert two_nodes.num_workers == 8


@pytest.mark.parametrize(
    ("devices", "strategy", "num_nodes"),
    [(1, "auto", 1), (2, "auto", 1), ("2", "ddp", 1), (3, "ddp_spawn", 1), (2, "auto", 2)],
)
def test_world_size_matches_lightnings_own_on_cpu(
    devices: object, strategy: str, num_nodes: int
) -> None:
    train = {"accelerator": "cpu", "devices": devices, "strategy": strategy, "num_nodes": num_nodes}
    cfg = parse_config({"TRAIN_CONFIG": train})
    trainer = L.Trainer(
        accelerator="cpu",
        devices=devices,  # type: ignore[arg-type]
        strategy=strategy,
        num_nodes=num_nodes,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    assert resolve_train_settings(cfg.train).world_size == trainer.world_size


@pytest.mark.parametrize("devices", ["two", "", "0,x", -2])
def test_bad_devices_is_a_clear_error(devices: object) -> None:
    with pytest.raises(ConfigError, match=r"TRAIN_CONFIG\.devices"):
        parse_config({"TRAIN_CONFIG": {"devices": devices}})


def _simulate(monkeypatch: pytest.MonkeyPatch, *, cuda: bool, mps: bool) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: int(cuda))
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: mps)


@pytest.mark.parametrize(
    ("cuda", "mps", "accelerator", "expected"),
    [
        (False, True, "gpu", "mps"),  # Apple silicon: `gpu` is MPS, not CUDA
        (False, True, "auto", "mps"),
        (False, True, "cpu", "cpu"),
        (True, False, "gpu", "gpu"),
        (True, False, "auto", "gpu"),
        (True, False, "cuda", "gpu"),
        (False, False, "auto", "cpu"),
        (False, False, "gpu", "gpu"),  # left to Lightning, whose error names the problem
        (False, False, "mps", "mps"),
    ],
)
def test_accelerator_resolution(
    monkeypatch: pytest.MonkeyPatch, cuda: bool, mps: bool, accelerator: str, expected: str
) -> None:
    _simulate(monkeypatch, cuda=cuda, mps=mps)
    assert resolve_accelerator(accelerator) == expected


@pytest.mark.parametrize("accelerator", ["gpu", "auto"])
def test_gpu_on_apple_silicon_follows_mps(
    monkeypatch: pytest.MonkeyPatch, accelerator: str
) -> None:
    _simulate(monkeypatch, cuda=False, mps=True)
    cfg = parse_config({"TRAIN_CONFIG": {"accelerator": accelerator, "deterministic": True}})
    settings = resolve_train_settings(cfg.train)
    assert settings.accelerator == "mps"
    assert (settings.precision, settings.pin_memory) == ("16-mixed", False)
    assert configure_reproducibility(cfg) == "warn"


def test_gpu_on_cuda_stays_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    _simulate(monkeypatch, cuda=True, mps=False)
    monkeypatch.setattr(torch.backends.cudnn, "deterministic", False)
    monkeypatch.setattr(torch.backends.cudnn, "benchmark", True)
    monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    cfg = parse_config({"TRAIN_CONFIG": {"accelerator": "gpu", "deterministic": True}})
    settings = resolve_train_settings(cfg.train)
    assert (settings.precision, settings.pin_memory) == ("16-mixed", True)
    assert configure_reproducibility(cfg) is True
    assert torch.backends.cudnn.deterministic and not torch.backends.cudnn.benchmark


def test_precision_and_pin_memory_follow_the_accelerator() -> None:
    def resolved(**train: object) -> tuple[str, bool]:
        settings = resolve_train_settings(parse_config({"TRAIN_CONFIG": train}).train)
        return settings.precision, settings.pin_memory

    assert resolved(accelerator="cpu") == ("32-true", False)
    assert resolved(accelerator="gpu") == ("16-mixed", True)
    assert resolved(accelerator="mps") == ("16-mixed", False)
    assert resolved(accelerator="gpu", precision="32-true")[0] == "32-true"


def test_num_workers_divided_among_ddp_processes(monkeypatch: pytest.MonkeyPatch) -> None:
    def workers(**train: object) -> int:
        return resolve_train_settings(parse_config({"TRAIN_CONFIG": train}).train).num_workers

    monkeypatch.setattr("os.cpu_count", lambda: 8)
    assert workers() == 8
    assert workers(strategy="ddp", devices=2, accelerator="cpu") == 4
    assert workers(num_workers=3) == 3
    assert workers(strategy="ddp", devices=[0, 1, 2, 3], accelerator="cpu") == 2
