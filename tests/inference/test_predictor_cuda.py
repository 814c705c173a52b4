"""Prediction on a real CUDA device matches the CPU (``-m gpu``; skipped without CUDA)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from skinet.inference.predictor import Predictor


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_prediction_matches_cpu(trained_checkpoint: Path) -> None:
    rng = np.random.default_rng(0)
    images = [rng.integers(0, 256, (70, 50, 3), dtype=np.uint8) for _ in range(3)]
    on_cpu = Predictor.from_checkpoint(trained_checkpoint, device="cpu")
    on_cuda = Predictor.from_checkpoint(trained_checkpoint, device="cuda")
    assert on_cuda.device.type == "cuda"
    for cpu_probs, cuda_probs in zip(
        on_cpu.predict_proba_batch(images), on_cuda.predict_proba_batch(images), strict=True
    ):
        np.testing.assert_allclose(cuda_probs, cpu_probs, atol=1e-4)
