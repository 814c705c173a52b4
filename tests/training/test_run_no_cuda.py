"""Nothing before the ``Trainer`` initialises CUDA, so fork-based DDP (``ddp_notebook``) works.

This machine has no CUDA, so every ``torch.cuda.is_available()``-guarded branch would be skipped
and a plain run would prove nothing. The test reports CUDA as available (one device, not yet
initialised), replaces the ``torch.cuda`` functions that initialise CUDA or touch a device with
recorders, and runs ``run_training`` for real up to the point where it builds the ``Trainer``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

import skinet.training.run as run_module
from skinet.config.experiment import parse_config
from skinet.runtime.devices import resolve_accelerator

# Each of these initialises CUDA (``_lazy_init`` is what every lazy initialisation goes through,
# including ``tensor.cuda()`` from C++) or needs an initialised device.
CUDA_DEVICE_CALLS = (
    "_lazy_init",
    "init",
    "get_rng_state",
    "get_rng_state_all",
    "set_rng_state",
    "set_rng_state_all",
    "current_device",
    "set_device",
    "synchronize",
    "mem_get_info",
    "memory_allocated",
    "get_device_properties",
    "get_device_name",
    "get_device_capability",
)


class TrainerReached(Exception):
    pass


@pytest.mark.parametrize("augment_on", ["cpu", "device"])
def test_no_cuda_call_before_the_trainer(
    tiny_raw: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, augment_on: str
) -> None:
    assert not torch.cuda.is_initialized()
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    # configure_reproducibility sets these on a CUDA machine; monkeypatch restores them after.
    monkeypatch.setattr(torch.backends.cudnn, "deterministic", torch.backends.cudnn.deterministic)
    monkeypatch.setattr(torch.backends.cudnn, "benchmark", torch.backends.cudnn.benchmark)
    monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    calls: list[str] = []
    for name in CUDA_DEVICE_CALLS:
        monkeypatch.setattr(torch.cuda, name, lambda *a, _name=name, **k: calls.append(_name))

    def stop_at_trainer(*args: Any, **kwargs: Any) -> None:
        raise TrainerReached

    monkeypatch.setattr(run_module, "build_trainer", stop_at_trainer)
    raw = tiny_raw
    raw["TRAIN_CONFIG"].update(
        {"accelerator": "auto", "use_mlflow_logger": False, "augment_on": augment_on}
    )
    cfg = parse_config(raw)
    assert resolve_accelerator(cfg.train.accelerator) == "gpu"  # the CUDA branches are taken

    with pytest.raises(TrainerReached):
        run_module.run_training(cfg, visualize=True)
    assert calls == []
    assert list(Path(cfg.train.output_dir).glob("*/augmented_samples.png"))
