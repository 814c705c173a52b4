"""Device-like image shifts for the robustness report: pure numpy/OpenCV, fixed strengths.

Each shift models one way another clinic's dermatoscope differs from ISIC's (colour balance,
tone curve, field-of-view border, focus, compression, framing, magnification) at two
strengths, both outside the ranges that the shipped augmentation files
(``configs/transforms_dermoscopy.yaml``, ``configs/transforms_robust.yaml``) sample from, so a
recipe is not scored on the augmentations it was trained with. The shifts are synthetic: they
guide, but a real other clinic's images (``skinet evaluate --external``) decide. Photometric
shifts leave the mask alone; geometric ones (``frame``, ``offcentre_crop``, ``scale``) move it
with the image, pixel for pixel.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from dataclasses import dataclass

import cv2
import numpy as np

from skinet.imaging.vignette import apply_circular_vignette

FRAME_ASPECT = 4 / 3
"""Width / height of the uncropped frame: the sensor of most video dermatoscopes."""


@dataclass(frozen=True)
class Shift:
    """One shift at one strength.

    Args:
        name: The shift (``gamma``, ``blur``, ...).
        level: ``mild`` or ``strong``.
        value: Its strength, in the unit of :data:`SHIFT_UNITS`.
    """

    name: str
    level: str
    value: float

    @property
    def key(self) -> str:
        """``{name}_{level}``, the condition's name in reports."""
        return f"{self.name}_{self.level}"

    @property
    def geometric(self) -> bool:
        """Whether the mask moves with the image."""
        return self.name in GEOMETRIC_SHIFTS

    @property
    def description(self) -> str:
        """The strength in words, e.g. ``gamma 0.5``."""
        return SHIFT_UNITS[self.name].format(self.value)


def shift_color_cast(image: np.ndarray, offset: float) -> np.ndarray:
    """A warm cast: red raised and blue lowered by ``offset`` grey levels."""
    out = image.astype(np.int16)
    out[..., 0] += round(offset)
    out[..., 2] -= round(offset)
    return np.clip(out, 0, 255).astype(np.uint8)


def shift_gamma(image: np.ndarray, gamma: float) -> np.ndarray:
    """``255 * (x / 255) ** gamma`` per channel (albumentations' RandomGamma convention)."""
    table = np.round(255.0 * (np.arange(256) / 255.0) ** gamma).astype(np.uint8)
    return cv2.LUT(image, table)


def shift_vignette(image: np.ndarray, radius: float) -> np.ndarray:
    """Black outside a centred circle of ``radius`` x half the shorter side."""
    return apply_circular_vignette(image, (0.5, 0.5), radius, fill=0)


def shift_blur(image: np.ndarray, sigma: float, input_size: int) -> np.ndarray:
    """Gaussian defocus of ``sigma`` pixels at the model's input resolution.

    The image is blurred at its own resolution with ``sigma * max(H, W) / input_size``, so
    after the predictor's resize the blur is at least ``sigma`` input pixels along both axes.
    """
    height, width = image.shape[:2]
    scaled = sigma * max(height, width) / input_size
    # A Gaussian's cost grows with sigma (1 s for sigma 56 on 512 px): blur a copy reduced so
    # sigma stays >= 4 of its pixels, then enlarge. The copy is still larger than the model
    # input (sigma <= 4 input px), so the predictor cannot tell the difference.
    factor = int(scaled // 4)
    if factor < 2:
        return cv2.GaussianBlur(image, (0, 0), sigmaX=scaled, borderType=cv2.BORDER_REFLECT_101)
    small = cv2.resize(
        image, (round(width / factor), round(height / factor)), interpolation=cv2.INTER_AREA
    )
    small = cv2.GaussianBlur(
        small, (0, 0), sigmaX=scaled / factor, borderType=cv2.BORDER_REFLECT_101
    )
    return cv2.resize(small, (width, height), interpolation=cv2.INTER_LINEAR)


def shift_jpeg(image: np.ndarray, quality: float) -> np.ndarray:
    """Re-encode as JPEG at ``quality`` (0-100) and decode again."""
    ok, buffer = cv2.imencode(
        ".jpg", cv2.cvtColor(image, cv2.COLOR_RGB2BGR), [cv2.IMWRITE_JPEG_QUALITY, round(quality)]
    )
    decoded = cv2.imdecode(buffer, cv2.IMREAD_COLOR) if ok else None
    if decoded is None:
        raise ValueError(f"JPEG round trip failed for an image of shape {image.shape}")
    return cv2.cvtColor(decoded, cv2.COLOR_BGR2RGB)


FRAME_BORDER_LEVEL = (30.0, 6.0)
"""Mean and standard deviation of the grey level outside the field of view: a sensor's dark
noise, above the dark-border crop's ``DARK_LEVEL`` (20), so the crop does not remove it."""
FRAME_FALLOFF = 0.35
"""Lens fall-off: brightness drops by this share from the centre to the field of view's edge."""


def shift_frame(
    image: np.ndarray, mask: np.ndarray, fraction: float, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """An uncropped full-frame dermatoscope image around the lesion image.

    A 4:3 canvas ``1 / fraction`` times taller than the image (and at least that much wider)
    shows a circular field of view as tall as the canvas. Inside it the image sits in the
    centre, surrounded by its own median border colour (skin without structure); outside it the
    canvas is dark sensor noise (:data:`FRAME_BORDER_LEVEL`), not exact black. Lens fall-off
    (:data:`FRAME_FALLOFF`) darkens everything towards the edge of the field of view. The mask
    is padded with background.
    """
    height, width = image.shape[:2]
    canvas_h = round(height / fraction)
    canvas_w = max(round(width / fraction), round(canvas_h * FRAME_ASPECT))
    top, left = (canvas_h - height) // 2, (canvas_w - width) // 2
    pads = (top, canvas_h - height - top, left, canvas_w - width - left)
    # The median border colour: the skin, whatever else touches the edge (a ruler, a patch).
    edge = np.median(np.concatenate([image[0], image[-1], image[:, 0], image[:, -1]]), axis=0)
    skin = tuple(float(v) for v in edge)
    framed = cv2.copyMakeBorder(image, *pads, cv2.BORDER_CONSTANT, value=skin).astype(np.float32)
    rows, cols = np.ogrid[:canvas_h, :canvas_w]
    radius = canvas_h / 2.0
    distance = np.hypot(cols + 0.5 - canvas_w / 2.0, rows + 0.5 - canvas_h / 2.0) / radius
    framed *= (1.0 - FRAME_FALLOFF * np.clip(distance, 0.0, 1.0) ** 2)[..., None]
    outside = distance > 1.0
    mean, std = FRAME_BORDER_LEVEL
    framed[outside] = rng.normal(mean, std, size=(int(outside.sum()), 3))
    shifted = np.clip(np.rint(framed), 0, 255).astype(np.uint8)
    return shifted, cv2.copyMakeBorder(mask, *pads, cv2.BORDER_CONSTANT, value=0)


def crop_window(
    image: np.ndarray, mask: np.ndarray, window: float, anchor: tuple[float, float]
) -> tuple[np.ndarray, np.ndarray]:
    """Crop ``window`` of each side; ``anchor`` places it (0 = left/top, 1 = right/bottom)."""
    height, width = image.shape[:2]
    crop_h, crop_w = max(1, round(height * window)), max(1, round(width * window))
    top = round((height - crop_h) * anchor[1])
    left = round((width - crop_w) * anchor[0])
    rows, cols = slice(top, top + crop_h), slice(left, left + crop_w)
    return image[rows, cols].copy(), mask[rows, cols].copy()


def shift_offcentre_crop(
    image: np.ndarray, mask: np.ndarray, window: float, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """Crop ``window`` of each side at a corner drawn from ``rng``: the lesion is off-centre."""
    corner = (float(rng.integers(0, 2)), float(rng.integers(0, 2)))
    return crop_window(image, mask, window, corner)


def shift_scale(
    image: np.ndarray, mask: np.ndarray, window: float
) -> tuple[np.ndarray, np.ndarray]:
    """Higher magnification: a centred crop of ``window`` of each side (zoom ``1 / window``)."""
    return crop_window(image, mask, window, (0.5, 0.5))


SHIFT_STRENGTHS: dict[str, tuple[float, float]] = {
    "color_cast": (35.0, 60.0),
    "gamma": (0.65, 0.5),
    "vignette": (0.75, 0.6),
    "blur": (2.0, 3.5),
    "jpeg": (20.0, 8.0),
    "frame": (0.65, 0.5),
    "offcentre_crop": (0.7, 0.55),
    "scale": (0.65, 0.5),
}
"""Mild and strong value of every shift (see :data:`SHIFT_UNITS`)."""

SHIFT_UNITS = {
    "color_cast": "R +{0:g}, B -{0:g}",
    "gamma": "gamma {0:g}",
    "vignette": "radius {0:g}",
    "blur": "sigma {0:g} input px",
    "jpeg": "quality {0:g}",
    "frame": "image {0:g} of a 4:3 frame, round field of view",
    "offcentre_crop": "{0:g} of sides, a corner",
    "scale": "{0:g} of sides, centred",
}
"""How each value reads in reports (vignette radius: x half the shorter side)."""

GEOMETRIC_SHIFTS = ("frame", "offcentre_crop", "scale")
LEVELS = ("mild", "strong")

SHIFTS: tuple[Shift, ...] = tuple(
    Shift(name, level, value)
    for name, values in SHIFT_STRENGTHS.items()
    for level, value in zip(LEVELS, values, strict=True)
)
"""Every shift at both strengths, in report order."""

_PHOTOMETRIC: dict[str, Callable[..., np.ndarray]] = {
    "color_cast": shift_color_cast,
    "gamma": shift_gamma,
    "vignette": shift_vignette,
    "jpeg": shift_jpeg,
}


def select_shifts(names: str | None) -> tuple[Shift, ...]:
    """All shifts, or those whose name is in the comma-separated ``names``."""
    if not names:
        return SHIFTS
    wanted = [name.strip() for name in names.split(",") if name.strip()]
    unknown = sorted(set(wanted) - set(SHIFT_STRENGTHS))
    if unknown:
        raise ValueError(f"unknown shift(s) {unknown}; choose from {sorted(SHIFT_STRENGTHS)}")
    return tuple(shift for shift in SHIFTS if shift.name in wanted)


def shift_rng(seed: int, shift: Shift, image_id: str) -> np.random.Generator:
    """The generator of one shift on one image: the same whatever the order or subset run."""
    return np.random.default_rng(
        [seed, zlib.crc32(shift.key.encode()), zlib.crc32(image_id.encode())]
    )


def apply_shift(
    shift: Shift,
    image: np.ndarray,
    mask: np.ndarray,
    input_size: int,
    rng: np.random.Generator,
) -> tuple[np.ndarray, np.ndarray]:
    """Shift an RGB uint8 image ``(H, W, 3)`` and its ``(H, W)`` mask.

    Args:
        shift: What to apply.
        image: The image at its original resolution.
        mask: Its mask; geometric shifts crop or pad it exactly as the image.
        input_size: The model's input side (``DATA_CONFIG.image_size``), the unit of ``blur``.
        rng: Draws the random parts (the corner of ``offcentre_crop``, the sensor noise of
            ``frame``); see :func:`shift_rng`.

    Returns:
        The shifted image (a new array) and its mask (the input mask when only pixels changed).
    """
    if image.ndim != 3 or image.shape[2] != 3 or image.dtype != np.uint8:
        raise ValueError(f"image must be RGB uint8 (H, W, 3), got {image.dtype} {image.shape}")
    if mask.shape != image.shape[:2]:
        raise ValueError(f"mask {mask.shape} and image {image.shape[:2]} sizes differ")
    if shift.name in _PHOTOMETRIC:
        return _PHOTOMETRIC[shift.name](image, shift.value), mask
    if shift.name == "blur":
        return shift_blur(image, shift.value, input_size), mask
    if shift.name == "frame":
        return shift_frame(image, mask, shift.value, rng)
    if shift.name == "offcentre_crop":
        return shift_offcentre_crop(image, mask, shift.value, rng)
    if shift.name == "scale":
        return shift_scale(image, mask, shift.value)
    raise ValueError(f"unknown shift {shift.name!r}; choose from {sorted(SHIFT_STRENGTHS)}")
