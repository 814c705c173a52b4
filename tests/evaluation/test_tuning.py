"""``tune_threshold`` agrees with the training threshold sweep on the same probabilities."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from skinet.evaluation.evaluate import select_samples
from skinet.evaluation.tuning import tune_threshold
from skinet.imaging.decode import read_image, read_mask
from skinet.inference.predictor import Predictor
from skinet.metrics.thresholds import find_best_threshold


def test_tuned_threshold_matches_find_best_threshold(trained_checkpoint: Path) -> None:
    predictor = Predictor.from_checkpoint(trained_checkpoint, device="cpu", batch_size=3)
    samples = select_samples(predictor.config, split="val")
    tuned = tune_threshold(predictor, samples)
    probs = predictor.predict_proba_batch([read_image(s.image_path) for s in samples])
    masks = [read_mask(s.mask_path) for s in samples]
    reference = find_best_threshold(
        torch.from_numpy(np.stack(probs)), torch.from_numpy(np.stack(masks)).bool()
    )
    assert tuned.num_images == len(samples) == 4
    assert tuned.threshold == pytest.approx(float(reference.optimal_threshold))
    assert tuned.dice == pytest.approx(float(reference.best_dice), abs=1e-6)
