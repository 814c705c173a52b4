"""``tune_threshold`` agrees with the training threshold sweep on the same probabilities."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from skinet.evaluation.evaluate import select_samples
from skinet.evaluation.tuning import tune_on_maps, tune_threshold
from skinet.imaging.decode import read_image, read_mask
from skinet.inference.predictor import Predictor
from skinet.metrics.thresholds import ThresholdSweep, find_best_threshold


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


def _labelled_folder(root: Path) -> tuple[Path, Path]:
    """Three good pairs, an unreadable image and an image whose mask has another size."""
    from tests.helpers.inference import write_mask, write_rgb

    images, masks = root / "images", root / "masks"
    images.mkdir(parents=True), masks.mkdir()
    for i in range(3):
        write_rgb(images / f"good{i}.png", 40, 48, seed=i)
        write_mask(masks / f"good{i}_mask.png", np.eye(40, 48))
    (images / "unreadable.jpg").write_text("<html>404</html>")
    write_mask(masks / "unreadable_mask.png", np.ones((40, 48)))
    write_rgb(images / "resized.png", 40, 48)
    write_mask(masks / "resized_mask.png", np.ones((20, 24)))
    return images, masks


def test_tuning_leaves_out_the_images_evaluation_counts_as_failures(
    trained_checkpoint: Path, tmp_path: Path
) -> None:
    import json

    from tests.helpers.inference import run_cli

    from skinet.evaluation.mask_folders import pair_image_folder

    images, masks = _labelled_folder(tmp_path)
    predictor = Predictor.from_checkpoint(trained_checkpoint, device="cpu", batch_size=2)
    tuned = tune_threshold(predictor, pair_image_folder(images, masks))
    assert tuned.num_images == 3
    assert sorted(tuned.failures) == ["resized", "unreadable"]
    assert (
        tuned.failures["resized"] == "mask size 24x20 does not match image size 48x40 (resized.png)"
    )

    out = tmp_path / "report"
    argv = ["evaluate", "--checkpoint", str(trained_checkpoint), "--images", str(images)]
    argv += ["--masks", str(masks), "--tune-threshold", "--device", "cpu", "--gallery", "0"]
    assert run_cli([*argv, "--output", str(out)]) == 1  # scored, with two failures
    summary = json.loads((out / "summary.json").read_text())
    assert summary["num_images"] == 3 and summary["num_failed"] == 2
    assert summary["threshold"] == pytest.approx(tuned.threshold)


def _maps(probs: torch.Tensor, masks: torch.Tensor) -> list[tuple[np.ndarray, np.ndarray]]:
    return [(p.numpy(), m.numpy()) for p, m in zip(probs, masks, strict=True)]


@pytest.mark.parametrize("selection", ["pooled_dice", "per_image"])
def test_tuning_chooses_as_the_sweep_with_ties_and_empty_masks(selection: str) -> None:
    # Probabilities on a coarse grid make whole runs of thresholds tie; the highest must win.
    generator = torch.Generator().manual_seed(0)
    probs = (torch.rand(5, 12, 12, generator=generator) * 4).floor() / 4 + 0.1
    masks = probs > 0.5
    masks[3] = False  # an image without lesion
    empty = torch.zeros_like(masks)
    for name, truth in (("ties", masks), ("all empty", empty)):
        tuned = tune_on_maps(_maps(probs, truth), selection)
        sweep = ThresholdSweep(selection=selection)
        sweep.update(probs, truth)
        expected = sweep.compute()
        assert tuned.threshold == float(expected.optimal_threshold), name
        assert tuned.dice == float(expected.best_dice), name
        if selection == "pooled_dice":
            reference = find_best_threshold(probs, truth)
            assert tuned.threshold == float(reference.optimal_threshold), name
    # All masks empty: Dice 1 where nothing is predicted, at the highest such threshold.
    tuned = tune_on_maps(_maps(probs, empty), selection)
    assert tuned.dice == 1.0 and tuned.threshold == 1.0
    with pytest.raises(ValueError, match="at least one labelled image"):
        tune_on_maps([], selection)
