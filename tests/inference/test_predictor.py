"""``Predictor``: original-resolution outputs, the checkpoint's threshold, TTA and batches."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from tests.helpers.inference import rewrite_checkpoint

from skinet.inference.predictor import Predictor


@pytest.fixture(scope="module")
def predictor(trained_checkpoint: Path) -> Predictor:
    return Predictor.from_checkpoint(trained_checkpoint, device="cpu")


def _image(height: int, width: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (height, width, 3), dtype=np.uint8)


@pytest.mark.parametrize(("height", "width"), [(50, 70), (64, 64), (33, 97), (120, 17)])
def test_outputs_keep_the_original_size(predictor: Predictor, height: int, width: int) -> None:
    image = _image(height, width)
    probs = predictor.predict_proba(image)
    mask = predictor.predict(image)
    assert probs.shape == mask.shape == (height, width)
    assert probs.dtype == np.float32 and probs.min() >= 0.0 and probs.max() <= 1.0
    assert mask.dtype == np.uint8 and set(np.unique(mask)) <= {0, 1}
    np.testing.assert_array_equal(mask, probs >= predictor.threshold)


def test_batch_matches_single_images(predictor: Predictor) -> None:
    images = [_image(50, 70, 1), _image(33, 97, 2), _image(64, 64, 3)]
    batched = predictor.predict_proba_batch(images)
    for image, probs in zip(images, batched, strict=True):
        np.testing.assert_allclose(probs, predictor.predict_proba(image), atol=1e-5)


def test_threshold_comes_from_the_checkpoint(trained_checkpoint: Path, tmp_path: Path) -> None:
    image = _image(40, 60)
    low = rewrite_checkpoint(trained_checkpoint, tmp_path / "low.ckpt", val_optimal_threshold=0.0)
    high = rewrite_checkpoint(trained_checkpoint, tmp_path / "high.ckpt", val_optimal_threshold=1.0)
    low_predictor = Predictor.from_checkpoint(low, device="cpu")
    high_predictor = Predictor.from_checkpoint(high, device="cpu")
    assert low_predictor.threshold == 0.0 and high_predictor.threshold == 1.0
    assert low_predictor.predict(image).all()  # every probability is >= 0
    assert high_predictor.predict(image).sum() < image.shape[0] * image.shape[1]
    overridden = Predictor.from_checkpoint(low, device="cpu", threshold=0.7)
    assert overridden.threshold == 0.7


def test_tta_averages_flips(trained_checkpoint: Path) -> None:
    plain = Predictor.from_checkpoint(trained_checkpoint, device="cpu")
    tta = Predictor.from_checkpoint(trained_checkpoint, device="cpu", tta=True)
    image = _image(48, 40)
    # Averaging over the four flips makes the prediction of a flipped image the flip of the
    # prediction (up to resampling), which a single pass does not guarantee.
    probs = tta.predict_proba(image)
    flipped = tta.predict_proba(image[:, ::-1].copy())[:, ::-1]
    np.testing.assert_allclose(probs, flipped, atol=1e-5)
    assert not np.allclose(probs, plain.predict_proba(image), atol=1e-6)


def test_config_and_post_processing_options(trained_checkpoint: Path) -> None:
    predictor = Predictor.from_checkpoint(
        trained_checkpoint, device="cpu", keep_largest=True, fill_holes=True, batch_size=2
    )
    assert predictor.config.data.image_size == 32
    mask = predictor.predict(_image(45, 45))
    assert mask.shape == (45, 45)


@pytest.mark.parametrize(
    ("image", "message"),
    [
        (np.zeros((8, 8), np.uint8), "shape"),
        (np.zeros((8, 8, 4), np.uint8), "shape"),
        (np.zeros((8, 8, 3), np.float32), "uint8"),
    ],
)
def test_bad_images_are_rejected(predictor: Predictor, image: np.ndarray, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        predictor.predict(image)


def test_bad_options_are_rejected(trained_checkpoint: Path) -> None:
    with pytest.raises(ValueError, match="threshold"):
        Predictor.from_checkpoint(trained_checkpoint, device="cpu", threshold=1.5)
    with pytest.raises(ValueError, match="batch_size"):
        Predictor.from_checkpoint(trained_checkpoint, device="cpu", batch_size=0)
