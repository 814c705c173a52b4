"""SkiNet's own augmentations (the circular vignette), custom names in TRANSFORM_CONFIG and the
shipped robust pipeline."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import albumentations as A
import numpy as np
import pytest
import yaml

from skinet.augment.checks import check_config
from skinet.augment.cpu import CircularVignette, build_train_transform
from skinet.config.errors import ConfigError
from skinet.config.experiment import parse_config
from skinet.imaging.vignette import apply_circular_vignette

REPO = Path(__file__).resolve().parents[2]


def _outside(height: int, width: int, center: tuple[float, float], radius: float) -> np.ndarray:
    rows, cols = np.mgrid[:height, :width]
    radius_px = radius * min(height, width) / 2
    return np.hypot(cols + 0.5 - center[0] * width, rows + 0.5 - center[1] * height) > radius_px


@pytest.mark.parametrize(
    ("shape", "center", "radius"),
    [((48, 64, 3), (0.5, 0.5), 1.0), ((40, 30, 3), (0.45, 0.55), 1.3), ((32, 32), (0.5, 0.5), 0.9)],
)
def test_vignette_darkens_only_outside_its_circle(shape, center, radius) -> None:
    image = np.random.default_rng(0).integers(60, 255, shape, dtype=np.uint8)
    out = apply_circular_vignette(image, center, radius, fill=5)
    outside = _outside(shape[0], shape[1], center, radius)
    assert out.dtype == np.uint8 and out.shape == image.shape and out is not image
    assert outside.any() and (~outside).any()
    assert (out[outside] == 5).all()
    assert np.array_equal(out[~outside], image[~outside])
    assert image.min() >= 60  # the input is untouched


def test_vignette_rejects_bad_arguments() -> None:
    image = np.zeros((8, 8, 3), np.uint8)
    with pytest.raises(ValueError, match="radius"):
        apply_circular_vignette(image, (0.5, 0.5), 0.0)
    with pytest.raises(ValueError, match="fill"):
        apply_circular_vignette(image, (0.5, 0.5), 1.0, fill=300)


def _run(seed: int, images: list[np.ndarray], masks: list[np.ndarray]) -> list[np.ndarray]:
    compose = A.Compose([CircularVignette(p=1.0)], seed=seed)
    outputs = []
    for image, mask in zip(images, masks, strict=True):
        out = compose(image=image, mask=mask)
        assert np.array_equal(out["mask"], mask)  # the mask is left unchanged
        outputs.append(out["image"])
    return outputs


def test_vignette_transform_is_seeded_and_leaves_the_mask_unchanged() -> None:
    rng = np.random.default_rng(1)
    images = [rng.integers(100, 255, (48, 64, 3), dtype=np.uint8) for _ in range(6)]
    masks = [rng.integers(0, 2, (48, 64), dtype=np.uint8) for _ in range(6)]
    first, again, other = _run(3, images, masks), _run(3, images, masks), _run(4, images, masks)
    assert all(np.array_equal(a, b) for a, b in zip(first, again, strict=True))
    assert not all(np.array_equal(a, b) for a, b in zip(first, other, strict=True))
    # Every call draws its own circle; darkened pixels are within the fill range.
    darkened = [(out != image).any(axis=2) for out, image in zip(first, images, strict=True)]
    assert len({int(d.sum()) for d in darkened}) > 1
    for out, dark in zip(first, darkened, strict=True):
        assert out[dark].max(initial=0) <= 20
        assert dark[24, 32] == 0  # the centre is never darkened


def test_vignette_reseeding_changes_the_stream() -> None:
    """Per-worker reseeding (``Compose.set_random_seed``) reaches the custom transform."""
    image = np.full((48, 64, 3), 200, np.uint8)
    mask = np.zeros((48, 64), np.uint8)
    compose = A.Compose([CircularVignette(p=1.0)], seed=0)
    first = compose(image=image, mask=mask)["image"]
    compose.set_random_seed(0)
    assert np.array_equal(compose(image=image, mask=mask)["image"], first)
    compose.set_random_seed(1)
    assert not np.array_equal(compose(image=image, mask=mask)["image"], first)


@pytest.mark.parametrize(
    ("params", "expected"),
    [
        ({"radius": 1.0}, "train_transforms[1] (CircularVignette): argument(s) 'radius'"),
        ({"radius_range": [1.3, 0.9]}, "train_transforms[1] (CircularVignette): invalid"),
        ({"fill_range": [0, 300]}, "train_transforms[1] (CircularVignette): invalid"),
        ({"p": 2}, "train_transforms[1] (CircularVignette)"),
    ],
)
def test_custom_transform_params_are_validated(params, expected) -> None:
    specs = [{"name": "HorizontalFlip"}, {"name": "CircularVignette", "params": params}]
    with pytest.raises(ConfigError) as info:
        check_config(parse_config({"TRANSFORM_CONFIG": {"train_transforms": specs}}))
    assert expected in str(info.value)


def test_robust_yaml_has_the_agreed_ranges() -> None:
    raw = yaml.safe_load((REPO / "configs" / "transforms_robust.yaml").read_text())
    cfg = parse_config(raw)
    by_name = {spec.name: spec.params for spec in cfg.transform.train_transforms}
    assert by_name["Affine"]["scale"] == [0.75, 1.25]
    assert by_name["Affine"]["translate_percent"] == [-0.08, 0.08]
    assert by_name["Affine"]["rotate"] == [-30, 30]
    assert by_name["RandomGamma"]["gamma_limit"] == [80, 125]
    assert by_name["ImageCompression"]["quality_range"] == [50, 100]
    assert by_name["GaussianBlur"]["blur_limit"] == [3, 5]
    assert by_name["CircularVignette"]["radius_range"] == [0.9, 1.3]
    compose = build_train_transform(cfg)
    assert isinstance(compose.transforms[-1], CircularVignette)


def test_robust_yaml_trains_a_step(tiny_raw: dict[str, Any]) -> None:
    from skinet.training.run import run_training

    raw = yaml.safe_load((REPO / "configs" / "transforms_robust.yaml").read_text())
    tiny_raw["TRANSFORM_CONFIG"] = raw["TRANSFORM_CONFIG"]
    tiny_raw["TRAIN_CONFIG"].update(
        max_epochs=1, limit_train_batches=1, limit_val_batches=1, use_mlflow_logger=False
    )
    result = run_training(parse_config(tiny_raw), visualize=True)
    assert result.epochs_trained == 1
    assert np.isfinite(result.metrics["val_best_dice_at_threshold"])
