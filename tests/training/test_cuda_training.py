"""The production config on a real CUDA device (``-m gpu``; skipped without CUDA).

Run on a machine with a GPU: ``pytest -m gpu``. The CPU suite cannot see CUDA-only failures
such as an op without a deterministic CUDA kernel, so these train for real on the device.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import torch

from skinet.config.experiment import ExperimentConfig, load_config
from skinet.keys import MetricsKey
from skinet.training.run import run_training

REPO = Path(__file__).resolve().parents[2]
PRODUCTION_CONFIG = REPO / "configs" / "main_config.yaml"

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]


def _overrides(data_root: Path, output_dir: Path, precision: str, **extra: Any) -> dict[str, Any]:
    """Dotted overrides turning the production config into a one-epoch 64 px CUDA run."""
    return {
        "TRAIN_CONFIG.output_dir": str(output_dir),
        "TRAIN_CONFIG.accelerator": "gpu",
        "TRAIN_CONFIG.devices": 1,
        "TRAIN_CONFIG.precision": precision,
        "TRAIN_CONFIG.deterministic": True,
        "TRAIN_CONFIG.max_epochs": 1,
        "TRAIN_CONFIG.batch_size": 4,
        "TRAIN_CONFIG.num_workers": 0,
        "TRAIN_CONFIG.use_mlflow_logger": False,
        "TRAIN_CONFIG.enable_progress_bar": False,
        "TRAIN_CONFIG.log_every_n_steps": 1,
        "DATA_CONFIG.dataset": "isic2017",
        "DATA_CONFIG.data_dir": str(data_root),
        "DATA_CONFIG.image_size": 64,
        **extra,
    }


def _production(
    data_root: Path, output_dir: Path, precision: str, **extra: Any
) -> ExperimentConfig:
    return load_config(PRODUCTION_CONFIG, _overrides(data_root, output_dir, precision, **extra))


@pytest.mark.parametrize("precision", ["16-mixed", "bf16-mixed"])
def test_production_config_trains_deterministically_on_cuda(
    synthetic_root: Path, tmp_path: Path, precision: str
) -> None:
    runs = [
        run_training(_production(synthetic_root, tmp_path / name, precision), visualize=True)
        for name in ("first", "second")
    ]

    def model_metrics(metrics: dict[str, float]) -> dict[str, float]:
        return {k: v for k, v in metrics.items() if not k.startswith(("perf/", "system/"))}

    first, second = (model_metrics(r.metrics) for r in runs)
    assert first == second  # deterministic: true holds on the device
    assert (MetricsKey.GRAD_SCALE.value in first) == (precision == "16-mixed")


def test_production_config_trains_with_inductor_on_cuda(
    synthetic_root: Path, tmp_path: Path
) -> None:
    cfg = _production(
        synthetic_root,
        tmp_path,
        "16-mixed",
        **{"TRAIN_CONFIG.torch_compile_backend": "inductor", "TRAIN_CONFIG.channels_last": True},
    )
    result = run_training(cfg, visualize=False)
    assert 0.0 <= result.metrics["test_dice"] <= 1.0


CUDA_STATE_SCRIPT = textwrap.dedent(
    """
    import json, sys
    import torch
    import skinet.training.run as run_module
    from skinet.config.experiment import load_config

    class Stop(Exception):
        pass

    def stop(*args, **kwargs):
        print("INITIALISED=" + json.dumps(torch.cuda.is_initialized()))
        raise Stop

    run_module.build_trainer = stop
    cfg = load_config(sys.argv[1], json.loads(sys.argv[2]))
    try:
        run_module.run_training(cfg, visualize=True)
    except Stop:
        pass
    """
)


def test_cuda_is_not_initialised_before_the_trainer(synthetic_root: Path, tmp_path: Path) -> None:
    overrides = _overrides(synthetic_root, tmp_path / "runs", "16-mixed")
    script = tmp_path / "cuda_state.py"
    script.write_text(CUDA_STATE_SCRIPT)
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    proc = subprocess.run(
        [sys.executable, str(script), str(PRODUCTION_CONFIG), json.dumps(overrides)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "INITIALISED=false" in proc.stdout
