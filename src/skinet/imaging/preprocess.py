"""The one preprocessing step from a decoded image to the model's square input, and back.

:func:`preprocess_image` is used by the dataset decode/cache path, by ``skinet data stats`` and by
the :class:`~skinet.inference.predictor.Predictor`, so training, validation, test, prediction,
evaluation
and the export sidecar all see the same pixels. In order:

0. **crop the dark border** (``crop_dark_border``): the outermost rows and columns in which at
   least :data:`DARK_BORDER_SHARE` of the pixels are dark (every channel <= :data:`DARK_LEVEL`)
   are cut off, as far in as they go from each edge: the black frame around an uncropped
   full-frame dermoscopy image, not a dark lesion inside it;
1. **resize** the RGB uint8 image: ``squash`` stretches it to ``image_size x image_size``;
   ``letterbox`` scales it by ``image_size / max(H, W)`` so its aspect ratio is kept (area
   interpolation when shrinking, linear when enlarging);
2. **colour constancy** on the resized pixels (``shades_of_gray``: Minkowski p-norm white balance
   with p = 6, as in top ISIC challenge entries), estimated on image content only;
3. **pad** a letterboxed image centred to the square with ``pad_value`` (masks with 0).

The returned :class:`Placement` says where the image landed, so a probability map at
``image_size`` is cropped back to the content, resized to the crop and placed at it in the
original size (0 in the cut-off border).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import cv2
import numpy as np

from skinet.config.data import ColorConstancy, DataConfig, ResizeMode
from skinet.config.experiment import ExperimentConfig

SHADES_OF_GRAY_POWER = 6
"""Minkowski norm of the shades-of-gray illuminant estimate (Finlayson & Trezzi, 2004)."""

DARK_LEVEL = 20
"""A pixel is dark when none of its channels exceeds this uint8 value (JPEG noise on black)."""

DARK_BORDER_SHARE = 0.98
"""A row or column belongs to the border when at least this share of its pixels is dark."""

MIN_CROP_SHARE = 0.125
"""A crop keeping less than this share of a side is refused (the image is nearly all dark)."""


@dataclass(frozen=True)
class Placement:
    """Where an ``(H, W)`` image sits inside the ``size x size`` model input.

    Attributes:
        original: ``(H, W)`` of the image before preprocessing.
        content: ``(h, w)`` of the resized image inside the square.
        offset: ``(top, left)`` of the content in the square (0, 0 unless letterboxed).
        window: ``(top, left, height, width)`` of the part of the original that was resized
            (``None``: the whole image; else its dark border was cropped off).
    """

    original: tuple[int, int]
    content: tuple[int, int]
    offset: tuple[int, int]
    window: tuple[int, int, int, int] | None = None

    def crop(self, array: np.ndarray) -> np.ndarray:
        """The content region of an array laid out like the model input (padding removed)."""
        (top, left), (height, width) = self.offset, self.content
        return array[top : top + height, left : left + width]

    def restore(self, probs: np.ndarray) -> np.ndarray:
        """A probability map at the model input's size -> the original ``(H, W)`` (bilinear);
        0 in a cropped-off border."""
        content = self.crop(probs)
        top, left, height, width = self.window or (0, 0, *self.original)
        if content.shape[:2] != (height, width):
            content = cv2.resize(
                np.ascontiguousarray(content), (width, height), interpolation=cv2.INTER_LINEAR
            )
        if (height, width) == self.original:
            return content
        out = np.zeros((*self.original, *content.shape[2:]), dtype=content.dtype)
        out[top : top + height, left : left + width] = content
        return out


def compute_placement(height: int, width: int, size: int | None, mode: ResizeMode) -> Placement:
    """The :class:`Placement` of an ``(H, W)`` image resized to ``size`` by ``mode``.

    ``letterbox``: ``h = max(1, floor(H * size / max(H, W) + 0.5))`` (likewise ``w``),
    ``top = (size - h) // 2``, ``left = (size - w) // 2``. ``size=None`` keeps the image as is.
    """
    if size is None:
        return Placement((height, width), (height, width), (0, 0))
    if mode == "squash":
        return Placement((height, width), (size, size), (0, 0))
    scale = size / max(height, width)
    content = (max(1, int(height * scale + 0.5)), max(1, int(width * scale + 0.5)))
    offset = ((size - content[0]) // 2, (size - content[1]) // 2)
    return Placement((height, width), content, offset)


def resize_image(image: np.ndarray, size: int | tuple[int, int]) -> np.ndarray:
    """Resize to ``size x size`` (or ``(height, width)``): by area when shrinking, else linearly."""
    target = (size, size) if isinstance(size, int) else size
    height, width = image.shape[:2]
    if (height, width) == target:
        return image
    shrink = target[0] < height or target[1] < width
    return cv2.resize(
        image,
        (target[1], target[0]),
        interpolation=cv2.INTER_AREA if shrink else cv2.INTER_LINEAR,
    )


def apply_shades_of_gray(image: np.ndarray, power: int = SHADES_OF_GRAY_POWER) -> np.ndarray:
    """Shades-of-gray white balance of an RGB uint8 image; a new uint8 array.

    The illuminant is ``e_c = mean(x_c ** p) ** (1 / p)`` per channel on ``x = pixel / 255``;
    each channel is multiplied by ``gain_c = |e| / (sqrt(3) e_c)`` (so a neutral grey is kept)
    and rounded half up, clipped to ``[0, 255]``. An all-black image is returned unchanged.
    """
    # Per-channel histograms and 256-entry tables: the same sums as over the pixels, ~5x faster.
    levels = np.arange(256, dtype=np.float64)
    counts = np.stack([np.bincount(image[..., c].ravel(), minlength=256) for c in range(3)])
    illuminant = np.power(counts @ np.power(levels / 255.0, power) / counts[0].sum(), 1.0 / power)
    norm = float(np.sqrt(np.sum(np.square(illuminant))))
    if norm <= 0.0 or not np.all(illuminant > 0):
        return image.copy()
    gains = norm / (np.sqrt(3.0) * illuminant)
    tables = np.clip(np.floor(levels[:, None] * gains + 0.5), 0, 255).astype(np.uint8)
    return np.stack([tables[image[..., c], c] for c in range(3)], axis=-1)


@dataclass(frozen=True)
class Preprocessing:
    """``DATA_CONFIG``'s preprocessing: resize mode, colour constancy and letterbox padding.

    ``image_size=None`` keeps each image at its own size (colour constancy only), as
    ``skinet data stats`` computes statistics at native resolution. ``crop_dark_border`` cuts
    the dark border off first (step 0 above). ``reduced_decode`` says how
    the dataset readers decode a JPEG that the resize shrinks at least twofold: at 1/2, 1/4 or
    1/8 scale (``DATA_CONFIG.reduced_jpeg_decode``); it is part of the cache key, and the
    :class:`~skinet.inference.predictor.Predictor` and the export sidecar decode in full.
    """

    image_size: int | None
    resize_mode: ResizeMode = "squash"
    color_constancy: ColorConstancy = "none"
    pad_value: int = 0
    reduced_decode: bool = False
    crop_dark_border: bool = False

    def describe(self) -> dict[str, Any]:
        """The steps as plain data, enough to redo them without SkiNet (the export sidecar)."""
        cc: dict[str, Any] = {"method": self.color_constancy}
        if self.color_constancy == "shades_of_gray":
            cc.update(
                power=SHADES_OF_GRAY_POWER,
                rule="x = pixel / 255 per RGB channel c of the resized image (before padding); "
                "e_c = mean(x_c ** power) ** (1 / power); gain_c = sqrt(sum(e ** 2)) / "
                "(sqrt(3) * e_c); out = clip(floor(pixel * gain_c + 0.5), 0, 255) as uint8",
            )
        return {
            "order": ["crop_dark_border", "resize", "color_constancy", "pad", "normalize"],
            "crop_dark_border": {
                "enabled": self.crop_dark_border,
                "dark_level": DARK_LEVEL,
                "border_share": DARK_BORDER_SHARE,
                "min_share": MIN_CROP_SHARE,
                "rule": "dark = max over RGB <= dark_level; a row (column) is border when the "
                "mean of dark along it >= border_share; cut the border rows (columns) off each "
                "edge up to the first one that is not; keep the whole image when what is left "
                "is shorter than min_share of a side. (H, W) below is the size of what is left; "
                "(crop_top, crop_left, crop_h, crop_w) where it lies in the original",
            },
            "resize_mode": self.resize_mode,
            "resize": "squash: (h, w) = (image_size, image_size); letterbox: s = image_size / "
            "max(H, W), h = max(1, floor(H * s + 0.5)), w = max(1, floor(W * s + 0.5))",
            "interpolation": "cv2.INTER_AREA if h < H or w < W else cv2.INTER_LINEAR "
            "(no resize when (h, w) == (H, W))",
            "color_constancy": cc,
            "pad": {
                "value": self.pad_value if self.resize_mode == "letterbox" else None,
                "top": "(image_size - h) // 2",
                "left": "(image_size - w) // 2",
                "rule": "place the (h, w) image at (top, left) in an image_size x image_size "
                "uint8 canvas filled with value (every channel)",
            },
            "restore": "probs[top:top + h, left:left + w] resized to (W, H) with "
            "cv2.INTER_LINEAR (no resize when (h, w) == (H, W)), placed at (crop_top, "
            "crop_left) in a zero map of the original size when the border was cropped, then "
            "lesion = probs >= threshold",
        }

    def at_native_size(self) -> Preprocessing:
        """The same preprocessing without resizing (or padding)."""
        return replace(self, image_size=None)

    def with_full_decode(self) -> Preprocessing:
        """The same preprocessing of fully decoded images (prediction's inputs)."""
        return replace(self, reduced_decode=False)


def build_preprocessing(cfg: ExperimentConfig | DataConfig) -> Preprocessing:
    """The :class:`Preprocessing` of ``DATA_CONFIG`` (old configs: squash, no colour constancy)."""
    data = cfg.data if isinstance(cfg, ExperimentConfig) else cfg
    return Preprocessing(
        data.image_size,
        data.resize_mode,
        data.color_constancy,
        data.pad_value,
        data.reduced_jpeg_decode,
        data.crop_dark_border,
    )


def as_preprocessing(spec: Preprocessing | int | None) -> Preprocessing:
    """``spec`` itself; an ``int`` is today's plain squash to that size, ``None`` no resize."""
    return spec if isinstance(spec, Preprocessing) else Preprocessing(spec)


def preprocess_image(
    image: np.ndarray, spec: Preprocessing, original: tuple[int, int] | None = None
) -> tuple[np.ndarray, Placement]:
    """RGB uint8 ``(H, W, 3)`` -> RGB uint8 model input and the :class:`Placement` undoing it.

    ``original`` is the ``(H, W)`` the placement is computed for when ``image`` was decoded at a
    reduced scale (a JPEG read at 1/2, 1/4 or 1/8); it defaults to ``image``'s own size.
    """
    height, width = original or image.shape[:2]
    window = None
    if spec.crop_dark_border:
        box = find_dark_border(image)
        if box[2:] != image.shape[:2]:
            window = _scale_window(box, image.shape[:2], (height, width))
            top, left, box_h, box_w = box
            image = image[top : top + box_h, left : left + box_w]
    crop_h, crop_w = window[2:] if window is not None else (height, width)
    placement = compute_placement(crop_h, crop_w, spec.image_size, spec.resize_mode)
    placement = replace(placement, original=(height, width), window=window)
    content = resize_image(image, placement.content)
    if spec.color_constancy == "shades_of_gray":
        content = apply_shades_of_gray(content)
    if spec.image_size is None or placement.content == (spec.image_size, spec.image_size):
        return content, placement
    return _pad(content, placement, spec.image_size, spec.pad_value), placement


def find_dark_border(image: np.ndarray) -> tuple[int, int, int, int]:
    """``(top, left, height, width)`` of an RGB uint8 image inside its dark border.

    Rows and columns in which at least :data:`DARK_BORDER_SHARE` of the pixels have every
    channel <= :data:`DARK_LEVEL` are cut off each edge, up to the first one that is not; the
    whole image is kept when less than :data:`MIN_CROP_SHARE` of a side would be left.
    """
    height, width = image.shape[:2]
    dark = image.max(axis=2) <= DARK_LEVEL
    rows = np.flatnonzero(dark.mean(axis=1) < DARK_BORDER_SHARE)
    cols = np.flatnonzero(dark.mean(axis=0) < DARK_BORDER_SHARE)
    if rows.size == 0 or cols.size == 0:
        return 0, 0, height, width
    top, bottom, left, right = int(rows[0]), int(rows[-1]) + 1, int(cols[0]), int(cols[-1]) + 1
    if bottom - top < MIN_CROP_SHARE * height or right - left < MIN_CROP_SHARE * width:
        return 0, 0, height, width
    return top, left, bottom - top, right - left


def _scale_window(
    box: tuple[int, int, int, int], decoded: tuple[int, int], original: tuple[int, int]
) -> tuple[int, int, int, int]:
    """A box found on a reduced-scale decode, in the original image's pixels."""
    if decoded == original:
        return box
    (fy, fx) = (original[0] / decoded[0], original[1] / decoded[1])
    top, left = round(box[0] * fy), round(box[1] * fx)
    bottom = min(original[0], round((box[0] + box[2]) * fy))
    right = min(original[1], round((box[1] + box[3]) * fx))
    return top, left, bottom - top, right - left


def preprocess_mask(mask: np.ndarray, placement: Placement, size: int | None) -> np.ndarray:
    """A {0, 1} ``(H, W)`` mask placed like its image: cropped to the image's window,
    nearest-neighbour resize, padded with 0."""
    if placement.window is not None:
        top, left, crop_h, crop_w = placement.window
        mask = mask[top : top + crop_h, left : left + crop_w]
    height, width = placement.content
    if mask.shape != (height, width):
        mask = cv2.resize(mask, (width, height), interpolation=cv2.INTER_NEAREST)
    if size is None or placement.content == (size, size):
        return mask
    return _pad(mask, placement, size, 0)


def preprocess_pair(
    image: np.ndarray, mask: np.ndarray, spec: Preprocessing
) -> tuple[np.ndarray, np.ndarray]:
    """An image and its mask through :func:`preprocess_image` with the same placement.

    The placement is computed for the mask's size, which is the image's size before any
    reduced-scale decode.
    """
    placed, placement = preprocess_image(image, spec, original=mask.shape[:2])
    return placed, preprocess_mask(mask, placement, spec.image_size)


def _pad(array: np.ndarray, placement: Placement, size: int, value: int) -> np.ndarray:
    out = np.full((size, size, *array.shape[2:]), value, dtype=array.dtype)
    (top, left), (height, width) = placement.offset, placement.content
    out[top : top + height, left : left + width] = array
    return out
