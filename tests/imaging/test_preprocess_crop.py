"""``DATA_CONFIG.crop_dark_border``: the black frame of an uncropped image is cut off first."""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
import pytest

from skinet.config.experiment import parse_config
from skinet.imaging.decode import load_pair
from skinet.imaging.preprocess import (
    Preprocessing,
    build_preprocessing,
    find_dark_border,
    preprocess_image,
    preprocess_pair,
)
from skinet.imaging.vignette import apply_circular_vignette


def black_frame(
    image: np.ndarray, mask: np.ndarray, fraction: float
) -> tuple[np.ndarray, np.ndarray]:
    """The image centred on an exact-black 4:3 canvas ``1 / fraction`` times taller."""
    height, width = image.shape[:2]
    canvas_h = round(height / fraction)
    canvas_w = max(round(width / fraction), round(canvas_h * 4 / 3))
    top, left = (canvas_h - height) // 2, (canvas_w - width) // 2
    pads = (top, canvas_h - height - top, left, canvas_w - width - left)
    framed = cv2.copyMakeBorder(image, *pads, cv2.BORDER_CONSTANT, value=(0, 0, 0))
    return framed, cv2.copyMakeBorder(mask, *pads, cv2.BORDER_CONSTANT, value=0)


def _skin(height: int, width: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Skin with a very dark lesion that touches the right edge, and its mask."""
    rng = np.random.default_rng(seed)
    image = np.clip(rng.normal((200, 150, 130), 10, (height, width, 3)), 0, 255)
    mask = np.zeros((height, width), np.uint8)
    cv2.ellipse(mask, (width - 8, height // 2), (width // 4, height // 4), 0, 0, 360, 1, -1)
    image[mask > 0] = (8, 6, 6)  # darker than the border level: still not border
    return image.astype(np.uint8), mask


def test_the_frame_of_an_uncropped_image_is_found_and_a_dark_lesion_kept() -> None:
    image, mask = _skin(60, 80)
    assert find_dark_border(image) == (0, 0, 60, 80)
    framed, _ = black_frame(image, mask, 0.5)
    top, left = (framed.shape[0] - 60) // 2, (framed.shape[1] - 80) // 2
    assert find_dark_border(framed) == (top, left, 60, 80)
    # JPEG-like noise on the black stays border; an all-dark image is kept whole.
    noisy = framed.copy()
    noisy[:top] = np.random.default_rng(1).integers(0, 21, noisy[:top].shape)
    assert find_dark_border(noisy) == (top, left, 60, 80)
    assert find_dark_border(np.zeros((40, 50, 3), np.uint8)) == (0, 0, 40, 50)
    # A circular field of view: its bounding box (corners stay dark inside it).
    circle = apply_circular_vignette(framed, (0.5, 0.5), 0.5)
    box = find_dark_border(circle)
    assert box[0] > top - 2 and box[2] < 60 + 4 and box[3] < framed.shape[1]


@pytest.mark.parametrize("mode", ["squash", "letterbox"])
def test_a_framed_image_preprocesses_as_the_image_itself_and_restores_into_its_frame(
    mode: str,
) -> None:
    image, mask = _skin(60, 80)
    framed, framed_mask = black_frame(image, mask, 0.6)
    spec = Preprocessing(32, mode, "shades_of_gray", crop_dark_border=True)  # type: ignore[arg-type]
    plain = preprocess_pair(image, mask, Preprocessing(32, mode, "shades_of_gray"))  # type: ignore[arg-type]
    cropped = preprocess_pair(framed, framed_mask, spec)
    for a, b in zip(cropped, plain, strict=True):
        assert np.array_equal(a, b)
    placed, placement = preprocess_image(framed, spec)
    assert placement.original == framed.shape[:2] and placement.window is not None
    top, left, height, width = placement.window
    probs = np.ones((32, 32), np.float32)
    restored = placement.restore(probs)
    assert restored.shape == framed.shape[:2]
    assert restored[top : top + height, left : left + width].all()
    assert restored.sum() == height * width  # 0 in the frame
    off = preprocess_pair(framed, framed_mask, Preprocessing(32, mode))  # type: ignore[arg-type]
    assert not np.array_equal(off[1], plain[1])  # without the option the lesion shrinks


def test_a_reduced_decode_crops_the_same_window_of_image_and_mask(tmp_path: Path) -> None:
    image, mask = _skin(300, 400)
    framed, framed_mask = black_frame(image, mask, 0.6)
    assert cv2.imwrite(str(tmp_path / "a.jpg"), cv2.cvtColor(framed, cv2.COLOR_RGB2BGR))
    assert cv2.imwrite(str(tmp_path / "a.png"), framed_mask * 255)
    spec = Preprocessing(64, crop_dark_border=True)
    full = load_pair(tmp_path / "a.jpg", tmp_path / "a.png", spec)
    reduced = load_pair(
        tmp_path / "a.jpg",
        tmp_path / "a.png",
        Preprocessing(64, crop_dark_border=True, reduced_decode=True),
    )
    assert isinstance(full, tuple) and isinstance(reduced, tuple)
    expected = cv2.resize(mask, (64, 64), interpolation=cv2.INTER_NEAREST)
    for result in (full, reduced):
        assert np.mean(result[1] != expected) < 0.01  # the lesion fills the input as unframed
    assert np.abs(full[0].astype(int) - reduced[0].astype(int)).mean() < 3.0


def test_the_option_is_read_from_the_config_and_described_for_the_sidecar() -> None:
    cfg = parse_config({"DATA_CONFIG": {"crop_dark_border": True, "image_size": 64}})
    spec = build_preprocessing(cfg)
    assert spec.crop_dark_border
    steps = spec.describe()
    assert steps["order"][0] == "crop_dark_border" and steps["crop_dark_border"]["enabled"]
    assert not build_preprocessing(parse_config({})).describe()["crop_dark_border"]["enabled"]


def test_training_reads_framed_images_cropped_through_the_config(tmp_path: Path) -> None:
    from skinet.training.data.loaders import build_dataset

    root = tmp_path / "clinic"  # the generic folder layout: images/ and masks/
    (root / "images").mkdir(parents=True)
    (root / "masks").mkdir()
    plain: dict[str, np.ndarray] = {}
    for i in range(6):
        image, mask = _skin(60, 80, seed=i)
        framed, framed_mask = black_frame(image, mask, 0.6)
        assert cv2.imwrite(
            str(root / "images" / f"p{i}.png"), cv2.cvtColor(framed, cv2.COLOR_RGB2BGR)
        )
        assert cv2.imwrite(str(root / "masks" / f"p{i}_segmentation.png"), framed_mask * 255)
        plain[f"p{i}"] = preprocess_pair(image, mask, Preprocessing(32))[1]
    data = {"dataset": "folder", "data_dir": str(root), "image_size": 32, "crop_dark_border": True}
    data |= {"val_fraction": 0.2, "test_fraction": 0.2, "cache_dir": str(tmp_path / "cache")}
    for cache_in_ram in (True, False):
        cfg = parse_config({"DATA_CONFIG": data, "TRAIN_CONFIG": {"cache_in_ram": cache_in_ram}})
        dataset = build_dataset(cfg, "train")
        assert dataset.cached == cache_in_ram and len(dataset) > 0
        for index, sample in enumerate(dataset.samples):
            assert np.array_equal(dataset.load_raw(index)[1], plain[sample.id])
