"""Device-like shifts: each changes what it names, geometric ones keep the mask aligned, the
strengths lie outside the robust recipe's training ranges, and the random parts are seeded."""

from __future__ import annotations

import numpy as np
import pytest

from skinet.evaluation.shifts import (
    SHIFT_STRENGTHS,
    SHIFTS,
    Shift,
    apply_shift,
    select_shifts,
    shift_blur,
    shift_color_cast,
    shift_frame,
    shift_gamma,
    shift_jpeg,
    shift_rng,
)
from skinet.imaging.vignette import apply_circular_vignette

LESION_RED = 200
"""Red value of lesion pixels in :func:`_coded_pair`; no other pixel has it."""


def _coded_pair(height: int = 60, width: int = 80) -> tuple[np.ndarray, np.ndarray]:
    """An image whose red channel is :data:`LESION_RED` exactly where the (off-centre) mask is."""
    rng = np.random.default_rng(0)
    mask = np.zeros((height, width), np.uint8)
    mask[5:25, 50:75] = 1
    image = rng.integers(60, 180, (height, width, 3), dtype=np.uint8)
    image[..., 0] = np.where(mask > 0, LESION_RED, image[..., 0] // 2 + 10)
    return image, mask


def _textured(size: int = 64) -> np.ndarray:
    rng = np.random.default_rng(1)
    return rng.integers(0, 256, (size, size, 3), dtype=np.uint8)


@pytest.mark.parametrize("shift", [s for s in SHIFTS if not s.geometric], ids=lambda s: s.key)
def test_photometric_shifts_change_pixels_and_keep_the_mask(shift: Shift) -> None:
    image, mask = _coded_pair()
    shifted, shifted_mask = apply_shift(shift, image, mask, 32, shift_rng(0, shift, "a"))
    assert shifted.shape == image.shape and shifted.dtype == np.uint8
    assert np.abs(shifted.astype(int) - image).mean() > 1.0
    assert shifted_mask is mask
    assert image[..., 0][mask > 0].min() == LESION_RED  # the input is untouched


@pytest.mark.parametrize("shift", [s for s in SHIFTS if s.geometric], ids=lambda s: s.key)
def test_geometric_shifts_move_the_mask_with_the_image(shift: Shift) -> None:
    image, mask = _coded_pair()
    for image_id in ("a", "b", "c", "d"):
        shifted, shifted_mask = apply_shift(shift, image, mask, 32, shift_rng(3, shift, image_id))
        assert shifted.shape[:2] == shifted_mask.shape
        assert shifted.shape[:2] != image.shape[:2]
        # Lens fall-off of ``frame`` dims the lesion's red, still above every other pixel's.
        np.testing.assert_array_equal(shifted[..., 0] > 140, shifted_mask > 0)


def test_frame_is_a_round_field_of_view_with_fall_off_and_a_noisy_border_not_black() -> None:
    image, mask = _coded_pair(60, 60)
    framed, framed_mask = shift_frame(image, mask, 0.5, np.random.default_rng(0))
    assert framed.shape[:2] == (120, 160)
    np.testing.assert_array_equal(framed_mask[30:90, 50:110], mask)
    assert framed_mask.sum() == mask.sum()
    corner, side = framed[:15, :15].astype(float), framed[55:65, :15].astype(float)
    # Outside the circle: dark sensor noise, neither exact black nor the crop's dark level.
    assert 24 < corner.mean() < 36 and corner.std() > 3 and (corner <= 20).mean() < 0.2
    assert 24 < side.mean() < 36  # the 4:3 sides left and right of the circle
    # Inside: the image, dimmed towards the edge (fall-off); the centre pixel nearly unchanged.
    centre = framed[60, 80].astype(int) - image[30, 30]
    assert np.abs(centre).max() <= 1
    inner = framed[30:90, 50:110].astype(float)
    assert (inner <= image + 0.5).all() and inner[0, 0].sum() < image[0, 0].sum() * 0.9
    # The dark-border crop finds no border to cut: the model sees the whole frame.
    from skinet.imaging.preprocess import find_dark_border

    assert find_dark_border(framed) == (0, 0, 120, 160)


def test_scale_is_a_centred_crop_and_offcentre_crop_a_corner() -> None:
    image, mask = _coded_pair(60, 80)
    zoomed, _ = apply_shift(
        Shift("scale", "strong", 0.5), image, mask, 32, shift_rng(0, SHIFTS[0], "a")
    )
    np.testing.assert_array_equal(zoomed, image[15:45, 20:60])
    crop = Shift("offcentre_crop", "mild", 0.7)
    corners = set()
    for index in range(16):
        cropped, _ = apply_shift(crop, image, mask, 32, shift_rng(0, crop, f"img{index}"))
        assert cropped.shape[:2] == (42, 56)
        matches = [
            (top, left)
            for top in (0, 18)
            for left in (0, 24)
            if np.array_equal(cropped, image[top : top + 42, left : left + 56])
        ]
        assert len(matches) == 1
        corners.add(matches[0])
    assert len(corners) > 1  # the corner is drawn per image, not fixed


def test_color_cast_warms_a_grey_card() -> None:
    grey = np.full((4, 4, 3), 128, np.uint8)
    cast = shift_color_cast(grey, 35)
    assert tuple(cast[0, 0]) == (163, 128, 93)
    assert tuple(shift_color_cast(np.full((1, 1, 3), 250, np.uint8), 35)[0, 0]) == (255, 250, 215)


def test_gamma_below_one_brightens_midtones_and_keeps_the_ends() -> None:
    ramp = np.arange(256, dtype=np.uint8).reshape(16, 16, 1).repeat(3, axis=2)
    out = shift_gamma(ramp, 0.5)
    assert out[0, 0, 0] == 0 and out[-1, -1, 0] == 255
    assert out.reshape(-1, 3)[128, 0] == round(255 * (128 / 255) ** 0.5)


def test_blur_sigma_is_in_input_pixels() -> None:
    """A step edge spreads with sigma * max(H, W) / input_size image pixels."""
    for size, input_size in ((64, 32), (128, 32), (512, 32)):
        step = np.zeros((size, size, 3), np.uint8)
        step[:, size // 2 :] = 255
        profile = shift_blur(step, 2.0, input_size)[size // 2, :, 0].astype(float)
        density = np.diff(profile)  # the blur kernel, sampled between pixels
        offsets = np.arange(size - 1) + 0.5 - size // 2
        sigma = np.sqrt((density * offsets**2).sum() / density.sum())
        assert sigma == pytest.approx(2.0 * size / input_size, rel=0.05)


def test_jpeg_strong_loses_more_than_mild() -> None:
    image = _textured()
    errors = [np.abs(shift_jpeg(image, q).astype(int) - image).mean() for q in (95, 20, 8)]
    assert errors[0] < errors[1] < errors[2]


def test_vignette_darkens_only_outside_its_circle() -> None:
    image = np.full((40, 60, 3), 150, np.uint8)
    out = apply_circular_vignette(image, (0.5, 0.5), 0.5, fill=7)
    assert out is not image and image.min() == 150
    assert tuple(out[20, 30]) == (150, 150, 150)  # centre
    assert tuple(out[0, 0]) == (7, 7, 7) and tuple(out[20, 45]) == (7, 7, 7)  # corner, x=+15
    assert tuple(out[20, 39]) == (150, 150, 150)  # 9.5 px from the centre: inside radius 10
    off = apply_circular_vignette(image, (0.0, 0.0), 1.0)
    assert off[0, 0, 0] == 150 and off[-1, -1, 0] == 0


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [({"radius": 0.0}, "radius"), ({"radius": 1.0, "fill": 300}, "fill")],
)
def test_vignette_rejects_bad_arguments(kwargs: dict[str, float], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        apply_circular_vignette(np.zeros((4, 4, 3), np.uint8), (0.5, 0.5), **kwargs)  # type: ignore[arg-type]


# The robust recipe's ranges (configs/transforms_robust.yaml); a shift inside one would score a
# recipe on the augmentations it was trained with.
TRAINING_RANGES = {
    "color_cast": (-15.0, 15.0),  # RGBShift per channel
    "gamma": (0.8, 1.25),  # RandomGamma gamma_limit [80, 125]
    "vignette": (0.9, 1.3),  # radius x half the shorter side
    "blur": (0.0, 1.2),  # GaussianBlur sigma at the input resolution
    "jpeg": (50.0, 100.0),  # ImageCompression quality
    "frame": (0.75, 1.25),  # Affine scale: the image's share of the frame
    "offcentre_crop": (0.8, 1.25),  # 1 / Affine scale, and translate 0.08 needs window < 0.84
    "scale": (0.8, 1.25),  # 1 / Affine scale [0.75, 1.25]
}


@pytest.mark.parametrize("name", list(SHIFT_STRENGTHS))
def test_strengths_lie_outside_the_training_ranges(name: str) -> None:
    low, high = TRAINING_RANGES[name]
    for value in SHIFT_STRENGTHS[name]:
        assert not low <= value <= high, f"{name} {value} inside the training range"


def test_shifts_are_deterministic_per_seed_and_image() -> None:
    image, mask = _coded_pair()
    crop = Shift("offcentre_crop", "strong", 0.55)
    first = [apply_shift(s, image, mask, 32, shift_rng(5, s, "x"))[0] for s in SHIFTS]
    again = [apply_shift(s, image, mask, 32, shift_rng(5, s, "x"))[0] for s in SHIFTS]
    assert all(np.array_equal(a, b) for a, b in zip(first, again, strict=True))
    draws = {shift_rng(seed, crop, "x").integers(0, 2**31) for seed in range(4)}
    assert len(draws) == 4


def test_select_shifts_by_name() -> None:
    assert select_shifts(None) == SHIFTS
    chosen = select_shifts("blur, jpeg")
    assert [s.key for s in chosen] == ["blur_mild", "blur_strong", "jpeg_mild", "jpeg_strong"]
    with pytest.raises(ValueError, match="unknown shift.*'bogus'"):
        select_shifts("blur,bogus")


def test_apply_shift_rejects_a_mask_of_another_size() -> None:
    image, _ = _coded_pair()
    with pytest.raises(ValueError, match="sizes differ"):
        apply_shift(SHIFTS[0], image, np.zeros((3, 3), np.uint8), 32, shift_rng(0, SHIFTS[0], "a"))
