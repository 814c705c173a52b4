"""The one preprocessing step: shades-of-gray colour constancy, squash/letterbox and its inverse."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import cv2
import numpy as np
import pytest

from skinet.config.errors import ConfigError
from skinet.config.experiment import parse_config
from skinet.datasets.decoded import decode_split
from skinet.datasets.layouts import Sample
from skinet.datasets.stats import compute_channel_stats
from skinet.imaging.preprocess import (
    Preprocessing,
    apply_shades_of_gray,
    build_preprocessing,
    compute_placement,
    preprocess_image,
    preprocess_mask,
    resize_image,
)
from skinet.training.data.loaders import build_dataset


def _grey_card(cast: tuple[float, float, float], seed: int = 0) -> np.ndarray:
    """A mid-grey card with texture, photographed under a coloured light (per-channel gain)."""
    rng = np.random.default_rng(seed)
    grey = np.clip(128 + rng.normal(0, 12, (48, 64, 1)), 0, 255).repeat(3, axis=2)
    return np.clip(grey * np.asarray(cast), 0, 255).astype(np.uint8)


def _channel_spread(image: np.ndarray) -> float:
    means = image.reshape(-1, 3).mean(axis=0)
    return float(means.max() - means.min())


@pytest.mark.parametrize("cast", [(1.25, 1.0, 0.75), (0.8, 0.95, 1.3), (1.0, 1.2, 1.0)])
def test_shades_of_gray_turns_a_colour_cast_grey_card_grey(cast) -> None:
    image = _grey_card(cast)
    assert _channel_spread(image) > 25  # clearly tinted
    balanced = apply_shades_of_gray(image)
    assert balanced.dtype == np.uint8 and balanced.shape == image.shape
    assert _channel_spread(balanced) < 2.0
    # Brightness is kept: the corrected card is grey at about the cast card's level.
    assert abs(balanced.mean() - image.mean()) < 12


def test_shades_of_gray_keeps_a_neutral_image_and_a_black_one() -> None:
    neutral = _grey_card((1.0, 1.0, 1.0))
    assert np.abs(apply_shades_of_gray(neutral).astype(int) - neutral).max() <= 1
    black = np.zeros((8, 8, 3), np.uint8)
    assert np.array_equal(apply_shades_of_gray(black), black)


def _ellipse_aspect(mask: np.ndarray) -> float:
    ys, xs = np.nonzero(mask)
    return (xs.max() - xs.min() + 1) / (ys.max() - ys.min() + 1)


def test_letterbox_keeps_the_aspect_ratio_of_an_odd_aspect_image() -> None:
    height, width = 60, 150
    image = np.full((height, width, 3), 200, np.uint8)
    mask = np.zeros((height, width), np.uint8)
    cv2.circle(mask, (75, 30), 20, 1, -1)  # a round lesion
    image[mask > 0] = (90, 50, 40)
    spec = Preprocessing(64, "letterbox", pad_value=7)
    placed, placement = preprocess_image(image, spec)
    placed_mask = preprocess_mask(mask, placement, 64)
    assert placed.shape == (64, 64, 3) and placed_mask.shape == (64, 64)
    assert placement.content == (26, 64) and placement.offset == (19, 0)
    # Padding above and below, with the pad value in the image and 0 in the mask.
    assert (placed[:19] == 7).all() and (placed[-19:] == 7).all()
    assert placed_mask[:19].max() == 0 and placed_mask[-19:].max() == 0
    # The lesion stays round; squashing the same image narrows it to 0.4 of its height.
    assert _ellipse_aspect(placed_mask) == pytest.approx(1.0, abs=0.12)
    squashed = preprocess_mask(mask, compute_placement(height, width, 64, "squash"), 64)
    assert _ellipse_aspect(squashed) == pytest.approx(60 / 150, abs=0.05)


@pytest.mark.parametrize("mode", ["squash", "letterbox"])
@pytest.mark.parametrize(("height", "width"), [(60, 150), (150, 60), (64, 64), (20, 30)])
def test_restore_maps_a_prediction_back_to_the_original_size(mode, height, width) -> None:
    mask = np.zeros((height, width), np.uint8)
    cv2.ellipse(mask, (width // 2, height // 2), (width // 3, height // 4), 15, 0, 360, 1, -1)
    placement = compute_placement(height, width, 64, mode)  # type: ignore[arg-type]
    probs = preprocess_mask(mask, placement, 64).astype(np.float32)
    restored = placement.restore(probs)
    assert restored.shape == (height, width)
    pred = restored >= 0.5
    jaccard = (pred & (mask > 0)).sum() / (pred | (mask > 0)).sum()
    assert jaccard > 0.85


def test_squash_is_the_plain_resize_of_before() -> None:
    image = np.random.default_rng(1).integers(0, 255, (70, 90, 3), dtype=np.uint8)
    placed, placement = preprocess_image(image, Preprocessing(32))
    assert np.array_equal(placed, resize_image(image, 32))
    assert placement.offset == (0, 0) and placement.content == (32, 32)


def test_colour_constancy_is_estimated_on_content_only() -> None:
    """Padding must not change the white balance: the letterboxed content equals the
    corrected squash of the same resized image."""
    image = _grey_card((1.2, 1.0, 0.8))[:, :40]  # 48 x 40
    spec = Preprocessing(64, "letterbox", "shades_of_gray", pad_value=0)
    placed, placement = preprocess_image(image, spec)
    content = apply_shades_of_gray(resize_image(image, placement.content))
    assert np.array_equal(placement.crop(placed), content)


def test_config_fields_and_defaults() -> None:
    default = build_preprocessing(parse_config({}))
    assert default == Preprocessing(256, "squash", "none", 0, reduced_decode=True)
    cfg = parse_config(
        {
            "DATA_CONFIG": {
                "image_size": 64,
                "resize_mode": "letterbox",
                "color_constancy": "shades_of_gray",
                "pad_value": 12,
                "reduced_jpeg_decode": False,
            }
        }
    )
    assert build_preprocessing(cfg) == Preprocessing(64, "letterbox", "shades_of_gray", 12)
    for field, value in [("resize_mode", "crop"), ("color_constancy", "grey_world")]:
        with pytest.raises(ConfigError, match=f"DATA_CONFIG.{field}"):
            parse_config({"DATA_CONFIG": {field: value}})
    with pytest.raises(ConfigError, match="DATA_CONFIG.pad_value"):
        parse_config({"DATA_CONFIG": {"pad_value": 256}})


def _write_pair(root: Path, name: str, image: np.ndarray, mask: np.ndarray) -> Sample:
    image_path, mask_path = root / f"{name}.png", root / f"{name}_segmentation.png"
    assert cv2.imwrite(str(image_path), cv2.cvtColor(image, cv2.COLOR_RGB2BGR))
    assert cv2.imwrite(str(mask_path), mask * 255)
    return Sample(name, image_path, mask_path)


def test_dataset_cache_and_disk_reads_share_the_preprocessing(tiny_raw: dict[str, Any]) -> None:
    tiny_raw["DATA_CONFIG"].update(resize_mode="letterbox", color_constancy="shades_of_gray")
    tiny_raw["DATA_CONFIG"]["max_samples_per_split"] = 2
    cached = build_dataset(parse_config(tiny_raw), "val")
    tiny_raw["TRAIN_CONFIG"]["cache_in_ram"] = False
    disk = build_dataset(parse_config(tiny_raw), "val")
    assert cached.cached and not disk.cached
    for index in range(len(cached)):
        for a, b in zip(cached.load_raw(index), disk.load_raw(index), strict=True):
            assert np.array_equal(a, b)


def test_decode_split_letterboxes_and_corrects(tmp_path: Path) -> None:
    image = _grey_card((1.3, 1.0, 0.7))[:24]  # 24 x 64: wide
    mask = np.zeros(image.shape[:2], np.uint8)
    mask[8:16, 20:40] = 1
    sample = _write_pair(tmp_path, "wide", image, mask)
    spec = Preprocessing(32, "letterbox", "shades_of_gray", pad_value=0)
    decoded = decode_split([sample], spec, keep=True)
    assert not decoded.problems and decoded.images is not None and decoded.masks is not None
    expected_image, placement = preprocess_image(image, spec)
    assert np.array_equal(decoded.images[0], expected_image)
    assert np.array_equal(decoded.masks[0], preprocess_mask(mask, placement, 32))
    assert placement.offset == (10, 0) and decoded.masks[0][:10].max() == 0
    assert _channel_spread(placement.crop(decoded.images[0])) < 3


def test_stats_are_computed_on_corrected_images(tmp_path: Path) -> None:
    paths = []
    for seed, cast in enumerate([(1.3, 1.0, 0.7), (1.2, 1.05, 0.8)]):
        image = _grey_card(cast, seed)
        paths.append(_write_pair(tmp_path, f"card{seed}", image, image[..., 0] * 0).image_path)
    raw = compute_channel_stats(paths, threads=1, progress=False)
    corrected = compute_channel_stats(
        paths,
        threads=1,
        progress=False,
        preprocessing=Preprocessing(16, "letterbox", "shades_of_gray"),
    )
    assert max(raw.mean) - min(raw.mean) > 0.1
    assert max(corrected.mean) - min(corrected.mean) < 0.01
    # Native size: resizing and padding are left out of the statistics.
    assert corrected.num_pixels == raw.num_pixels == 2 * 48 * 64
    assert "color_constancy: shades_of_gray" in corrected.to_yaml()
    assert "color_constancy" not in raw.to_yaml()


def test_data_stats_cli_applies_the_configs_colour_constancy(
    tiny_raw: dict[str, Any], tmp_path: Path, capsys
) -> None:
    import yaml

    from skinet.cli.main import main

    printed = {}
    for method in ("none", "shades_of_gray"):
        tiny_raw["DATA_CONFIG"]["color_constancy"] = method
        path = tmp_path / f"{method}.yaml"
        path.write_text(yaml.safe_dump(tiny_raw))
        assert main(["data", "stats", "--config", str(path), "--split", "train"]) == 0
        printed[method] = yaml.safe_load(capsys.readouterr().out)["DATA_CONFIG"]
    assert "color_constancy" not in printed["none"]
    assert printed["shades_of_gray"]["color_constancy"] == "shades_of_gray"
    assert printed["shades_of_gray"]["mean"] != printed["none"]["mean"]
    # The printed block loads back as a config with the same correction.
    assert parse_config({"DATA_CONFIG": printed["shades_of_gray"]}).data.color_constancy == (
        "shades_of_gray"
    )
