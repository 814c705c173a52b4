"""``benchmarks/bench_recipe_speed.py`` on the shipped laptop recipe: both figures per variant."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.heavy
def test_the_shipped_recipe_and_a_variant_are_timed_against_batch_norm(tmp_path: Path) -> None:
    # configs/cpu_budget.yaml as shipped: its cosine_budget schedule needs a max_time.
    command = [sys.executable, str(REPO / "benchmarks" / "bench_recipe_speed.py")]
    command += ["--rounds", "1", "--epochs", "2", "--num-train", "16", "--model-steps", "1"]
    command += ["--variant", "deep2=MODEL_CONFIG.deep_supervision=2"]
    command += ["--variant", "bf16=TRAIN_CONFIG.precision=bf16-mixed"]
    env = {**os.environ, "PYTHONPATH": str(REPO / "src"), "TMPDIR": str(tmp_path)}
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=900)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    rows = {
        line.split("|")[1].strip(): line
        for line in done.stdout.splitlines()
        if line.startswith("| ") and not line.startswith("| variant")
    }
    assert set(rows) == {"shipped", "batch", "deep2", "bf16"}, done.stdout
    assert "| 1.000 |" in rows["batch"]  # the reference against itself


def test_the_model_only_step_of_a_bf16_variant_runs_under_bfloat16() -> None:
    sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        import torch
        from bench_norm import autocast_bf16

        seen: list[torch.dtype] = []

        def step(model: torch.nn.Module, images: torch.Tensor, masks: torch.Tensor) -> torch.Tensor:
            logits = model(images)
            seen.append(logits.dtype)
            return torch.nn.functional.binary_cross_entropy_with_logits(logits.float(), masks)

        model = torch.nn.Conv2d(3, 1, 3, padding=1)
        images, masks = torch.randn(2, 3, 8, 8), torch.rand(2, 1, 8, 8)
        autocast_bf16(step)(model, images, masks).backward()
        step(model, images, masks)
        assert seen == [torch.bfloat16, torch.float32]
        assert model.weight.grad is not None and model.weight.grad.dtype == torch.float32
    finally:
        sys.path.remove(str(REPO / "benchmarks"))
