"""Each batched device op against the albumentations transform it stands for, on CPU tensors."""

from __future__ import annotations

import albumentations as A
import cv2
import numpy as np
import pytest
import torch
from albumentations.augmentations.blur.functional import create_gaussian_kernel_1d
from albumentations.augmentations.geometric.functional import (
    center,
    create_affine_transformation_matrix,
)
from albumentations.augmentations.pixel import functional as fpixel

from skinet.augment import device_ops as ops
from skinet.augment.device_transforms import DEVICE_TRANSFORMS
from skinet.imaging.vignette import apply_circular_vignette


def _image(size: int = 32, seed: int = 0) -> np.ndarray:
    """A uint8 RGB image with smooth gradients, edges and texture (every hue present)."""
    rng = np.random.default_rng(seed)
    rows, cols = np.mgrid[:size, :size] / size
    base = np.stack([rows, cols, 1 - (rows + cols) / 2], axis=-1) * 200 + 20
    base[size // 4 : size // 2, size // 4 : 3 * size // 4] *= 0.4
    return np.clip(base + rng.normal(0, 12, base.shape), 0, 255).astype(np.uint8)


def _mask(size: int = 32) -> np.ndarray:
    rows, cols = np.mgrid[:size, :size]
    return (((rows - size * 0.45) ** 2 + (cols - size * 0.6) ** 2) < (size * 0.3) ** 2).astype(
        np.uint8
    )


def _batch(image: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(image).permute(2, 0, 1)[None].float()


def _numpy(batch: torch.Tensor) -> np.ndarray:
    return batch[0].permute(1, 2, 0).numpy()


def _hsv_round_trip_error(image: np.ndarray) -> tuple[float, float]:
    """Mean and max error of OpenCV's own uint8 RGB -> HSV -> RGB (its quantisation floor)."""
    round_trip = cv2.cvtColor(cv2.cvtColor(image, cv2.COLOR_RGB2HSV), cv2.COLOR_HSV2RGB)
    difference = np.abs(round_trip.astype(np.float32) - image)
    return float(difference.mean()), float(difference.max())


def _assert_within_hsv_quantisation(
    got: np.ndarray, expected: np.ndarray, image: np.ndarray
) -> None:
    # Both sides quantise differently (OpenCV: 180 hue levels and uint8 S/V), so allow twice
    # OpenCV's own round-trip error.
    mean_floor, max_floor = _hsv_round_trip_error(image)
    difference = np.abs(got - expected.astype(np.float32))
    assert difference.mean() <= 2 * mean_floor + 0.1, (difference.mean(), mean_floor)
    assert difference.max() <= 2 * max_floor + 1, (difference.max(), max_floor)


def _run_op(name: str, params: dict, image: np.ndarray, mask: np.ndarray) -> tuple:
    op = DEVICE_TRANSFORMS[name](getattr(A, name)(**params, p=1.0))
    images, masks = op(_batch(image), torch.from_numpy(mask)[None, None].float(), torch.Generator())
    return _numpy(images), masks[0, 0].numpy()


@pytest.mark.parametrize("name", ["HorizontalFlip", "VerticalFlip"])
def test_flips_equal_albumentations(name: str) -> None:
    image, mask = _image(), _mask()
    expected = getattr(A, name)(p=1.0)(image=image, mask=mask)
    got_image, got_mask = _run_op(name, {}, image, mask)
    np.testing.assert_array_equal(got_image, expected["image"])
    np.testing.assert_array_equal(got_mask, expected["mask"])


def test_rot90_equals_albumentations_for_every_factor() -> None:
    image, mask = _image(), _mask()
    transform = A.RandomRotate90(p=1.0)
    factors = torch.tensor([0, 1, 2, 3])
    images = ops.rot90(_batch(image).repeat(4, 1, 1, 1), factors)
    masks = ops.rot90(torch.from_numpy(mask)[None, None].repeat(4, 1, 1, 1), factors)
    for k in range(4):
        np.testing.assert_array_equal(_numpy(images[k : k + 1]), transform.apply(image, factor=k))
        np.testing.assert_array_equal(masks[k, 0].numpy(), transform.apply_to_mask(mask, factor=k))


@pytest.mark.parametrize(
    ("translate", "shear", "scale", "rotate", "fill"),
    [
        ((3, -2), (0.0, 0.0), (1.1, 0.9), 17.0, 0.0),
        ((0, 0), (-8.0, 4.0), (0.8, 0.8), -30.0, 40.0),
        ((-4, 5), (0.0, 0.0), (1.0, 1.0), 90.0, 0.0),
    ],
)
def test_affine_matches_albumentations_on_fixed_parameters(
    translate: tuple, shear: tuple, scale: tuple, rotate: float, fill: float
) -> None:
    image, mask = _image(), _mask()
    transform = A.Affine(fill=fill, p=1.0)
    matrix = create_affine_transformation_matrix(
        {"x": translate[0], "y": translate[1]},
        {"x": shear[0], "y": shear[1]},
        {"x": scale[0], "y": scale[1]},
        rotate,
        center(image.shape),
    )
    expected = transform.apply(image, matrix=matrix, output_shape=image.shape[:2])
    expected_mask = transform.apply_to_mask(mask, matrix=matrix, output_shape=mask.shape)
    matrices = ops.compute_affine_matrices(
        torch.tensor([translate], dtype=torch.float32),
        torch.tensor([shear]),
        torch.tensor([scale]),
        torch.tensor([rotate]),
        *image.shape[:2],
    )
    np.testing.assert_allclose(matrices[0].numpy(), matrix, atol=1e-5)
    got = _numpy(ops.warp_affine(_batch(image), matrices, "bilinear", fill))
    got_mask = ops.warp_affine(torch.from_numpy(mask)[None, None].float(), matrices, "nearest")
    difference = np.abs(got - expected.astype(np.float32))
    # OpenCV interpolates in 1/32-pixel fixed point and rounds to uint8.
    assert difference.mean() < 0.6 and np.percentile(difference, 99) < 3.0
    assert (got_mask[0, 0].numpy() != expected_mask).mean() < 0.01


COLOUR_CASES = [
    ("brightness", ops.adjust_brightness, fpixel.adjust_brightness_torchvision, 1.13),
    ("contrast", ops.adjust_contrast, fpixel.adjust_contrast_torchvision, 0.86),
    ("saturation", ops.adjust_saturation, fpixel.adjust_saturation_torchvision, 1.1),
    ("hue", ops.adjust_hue, fpixel.adjust_hue_torchvision, 0.02),
    ("hue_negative", ops.adjust_hue, fpixel.adjust_hue_torchvision, -0.3),
]


@pytest.mark.parametrize(("label", "device_fn", "cpu_fn", "factor"), COLOUR_CASES)
def test_color_jitter_steps_match_albumentations(
    label: str, device_fn, cpu_fn, factor: float
) -> None:
    image = _image()
    expected = cpu_fn(image, factor).astype(np.float32)
    got = _numpy(device_fn(_batch(image), torch.tensor([factor])))
    if "hue" in label:
        _assert_within_hsv_quantisation(got, expected, image)
    else:
        assert np.abs(got - expected).max() <= 1.0


def test_hue_saturation_value_matches_albumentations() -> None:
    image = _image()
    transform = A.HueSaturationValue(p=1.0)
    for hue, sat, val in [(8.0, 20.0, -15.0), (-6.0, -20.0, 15.0), (0.0, 0.0, 10.0)]:
        expected = transform.apply(image, hue_shift=hue, sat_shift=sat, val_shift=val)
        got = _numpy(
            ops.shift_hsv(
                _batch(image), torch.tensor([hue]), torch.tensor([sat]), torch.tensor([val])
            )
        )
        _assert_within_hsv_quantisation(got, expected, image)


def test_hsv_round_trip_is_exact() -> None:
    batch = _batch(_image())
    torch.testing.assert_close(ops.hsv_to_rgb(ops.rgb_to_hsv(batch)), batch, atol=1e-3, rtol=0)


def test_gamma_brightness_contrast_and_rgb_shift_match_albumentations() -> None:
    image, batch = _image(), _batch(_image())
    gamma = A.RandomGamma(p=1.0).apply(image, gamma=0.85)
    got = _numpy(ops.gamma(batch, torch.tensor([0.85])))
    assert np.abs(got - gamma).max() <= 1.0  # albumentations truncates its lookup table
    contrast = A.RandomBrightnessContrast(p=1.0).apply(image, alpha=1.15, beta=-0.1 * 255)
    got = _numpy(ops.brightness_contrast(batch, torch.tensor([1.15]), torch.tensor([-0.1 * 255])))
    assert np.abs(got - contrast).max() <= 1.0  # albucore truncates
    shifts = np.array([10.0, -7.0, 3.0], np.float32)
    shifted = A.RGBShift(p=1.0).apply(image, noise_map=shifts)
    got = _numpy(ops.rgb_shift(batch, torch.from_numpy(shifts)[None]))
    assert np.abs(got - shifted).max() <= 0.5 + 1e-4


@pytest.mark.parametrize(("sigma", "size"), [(0.6, 3), (1.1, 4), (1.2, 5), (0.9, 0)])
def test_gaussian_blur_matches_albumentations(sigma: float, size: int) -> None:
    image = _image()
    expected = A.GaussianBlur(p=1.0).apply(image, kernel=create_gaussian_kernel_1d(sigma, size))
    # Two samples with different kernel sizes in one batch: each gets its own kernel.
    kernels = ops.gaussian_kernels(torch.tensor([sigma, 0.3]), torch.tensor([size, 7]))
    got = ops.gaussian_blur(_batch(image).repeat(2, 1, 1, 1), kernels)
    assert np.abs(_numpy(got[:1]) - expected).max() <= 0.5 + 1e-3


@pytest.mark.parametrize("quality", [50, 75, 95])
def test_jpeg_approximation_is_closer_to_opencv_jpeg_than_the_original(quality: int) -> None:
    image = _image(48)
    expected = A.ImageCompression(p=1.0).apply(image, quality=quality, image_type=".jpg")
    got = _numpy(ops.jpeg_approximation(_batch(image), torch.tensor([quality])))
    error_approx = np.abs(got - expected.astype(np.float32)).mean()
    error_identity = np.abs(image.astype(np.float32) - expected).mean()
    assert error_approx < 0.5 * error_identity, (error_approx, error_identity)


def test_jpeg_approximation_keeps_odd_sizes() -> None:
    batch = _batch(_image(37))
    assert ops.jpeg_approximation(batch, torch.tensor([60])).shape == batch.shape


def test_vignette_equals_the_cpu_transform_and_leaves_the_mask() -> None:
    image, mask = _image(), _mask()
    got = ops.circular_vignette(
        _batch(image), torch.tensor([[0.52, 0.47]]), torch.tensor([0.8]), torch.tensor([12])
    )
    np.testing.assert_array_equal(
        _numpy(got), apply_circular_vignette(image, (0.52, 0.47), 0.8, 12)
    )
    params = {"radius_range": (0.7, 0.9), "center_jitter": 0.05, "fill_range": (0, 20)}
    from skinet.augment.cpu import CircularVignette

    op = DEVICE_TRANSFORMS["CircularVignette"](CircularVignette(**params, p=1.0))
    images, masks = op(_batch(image), torch.from_numpy(mask)[None, None].float(), torch.Generator())
    np.testing.assert_array_equal(masks[0, 0].numpy(), mask)
    changed = (_numpy(images) != image).any(axis=-1)
    rows, cols = np.mgrid[:32, :32] + 0.5
    inside = (rows - 16) ** 2 + (cols - 16) ** 2 < (0.7 * 16 - 0.05 * 32 * 1.5) ** 2
    assert changed.any() and not changed[inside].any()


def test_normalize_matches_the_cpu_normalizer() -> None:
    from skinet.imaging.normalize import Normalizer

    image = _image()
    for mode in ("standard", "image_per_channel"):
        normalizer = Normalizer(mode, (0.5, 0.4, 0.3), (0.2, 0.25, 0.3))  # type: ignore[arg-type]
        got = ops.normalize(
            _batch(image), mode, torch.tensor([0.5, 0.4, 0.3]), torch.tensor([0.2, 0.25, 0.3])
        )
        np.testing.assert_allclose(got[0].numpy(), normalizer(image), atol=1e-4)
