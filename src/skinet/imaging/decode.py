"""Decoding images and masks into the canonical form: RGB uint8 and binary {0, 1} uint8.

Unusual but unambiguous inputs are converted (grayscale/RGBA/16-bit images, 0/1, anti-aliased,
palette or RGB masks); anything else becomes a :class:`~skinet.imaging.errors.Problem` naming the
file, so a dataset check can report every bad file at once.
"""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np

from skinet.imaging.errors import DatasetError, Problem
from skinet.imaging.preprocess import (
    Preprocessing,
    as_preprocessing,
    compute_placement,
    preprocess_pair,
)

MASK_THRESHOLD = 128
"""Anti-aliased 8-bit masks are binarised at this value."""

JPEG_REDUCTIONS = {
    8: cv2.IMREAD_REDUCED_COLOR_8,
    4: cv2.IMREAD_REDUCED_COLOR_4,
    2: cv2.IMREAD_REDUCED_COLOR_2,
}
"""libjpeg's DCT-domain downscales, largest first: decoding at 1/r skips most of the work."""


_SIGNATURES = (
    (b"\xff\xd8", "JPEG"),
    (b"\x89PNG", "PNG"),
    (b"BM", "BMP"),
    (b"II*\x00", "TIFF"),
    (b"MM\x00*", "TIFF"),
)
"""Leading bytes of the formats datasets use, to tell a mislabelled file from a corrupt one."""
_SUFFIX_FORMATS = {
    ".jpg": "JPEG",
    ".jpeg": "JPEG",
    ".png": "PNG",
    ".bmp": "BMP",
    ".tif": "TIFF",
    ".tiff": "TIFF",
}


class DecodeError(ValueError):
    """A file could not be turned into a usable image or mask."""


def _read_bytes_checked(path: Path) -> np.ndarray:
    data = path.read_bytes()
    if not data:
        raise DecodeError("file is empty")
    suffix = path.suffix.lower()
    signature = next((name for magic, name in _SIGNATURES if data.startswith(magic)), None)
    expected = _SUFFIX_FORMATS.get(suffix)
    if expected is not None and signature is None:
        raise DecodeError(
            f"not a {expected} file: it does not start with the {expected} signature "
            f"(first bytes {data[:16]!r}); is it a text or HTML page saved under an image name?"
        )
    if signature is not None and signature != expected:
        return np.frombuffer(data, np.uint8)  # another image format under this name: let OpenCV
    tail = data.rstrip(b"\x00")[-64:]
    # OpenCV decodes a truncated JPEG into a half-grey image with only a warning on stderr, so
    # check the end-of-image marker ourselves; likewise PNG's IEND chunk.
    if suffix in (".jpg", ".jpeg") and b"\xff\xd9" not in tail:
        raise DecodeError("truncated or corrupt JPEG (no end-of-image marker)")
    if suffix == ".png" and b"IEND" not in tail:
        raise DecodeError("truncated or corrupt PNG (no IEND chunk)")
    if suffix == ".bmp" and len(data) >= 6 and int.from_bytes(data[2:6], "little") > len(data):
        raise DecodeError("truncated BMP (file shorter than its header says)")
    return np.frombuffer(data, np.uint8)


# IMREAD_UNCHANGED ignores the EXIF orientation; ANYDEPTH | ANYCOLOR keeps 16 bits and greyscale
# but rotates the pixels upright (alpha is dropped; nothing here uses it).
FULL_DECODE = cv2.IMREAD_ANYDEPTH | cv2.IMREAD_ANYCOLOR


def _decode(path: Path, flags: int = FULL_DECODE) -> np.ndarray:
    return _decode_buffer(_read_bytes_checked(path), flags)


def _decode_buffer(buffer: np.ndarray, flags: int = FULL_DECODE) -> np.ndarray:
    array = cv2.imdecode(buffer, flags)
    if array is None or array.size == 0:
        raise DecodeError("cannot decode (corrupt or unsupported format)")
    return array


def jpeg_size(data: bytes | np.ndarray) -> tuple[int, int] | None:
    """``(height, width)`` from a JPEG's frame header, without decoding; ``None`` if not found."""
    raw = bytes(data[:65536]) if isinstance(data, np.ndarray) else data[:65536]
    i = 2
    while i + 4 <= len(raw):
        if raw[i] != 0xFF:
            return None
        marker = raw[i + 1]
        if marker == 0xFF:  # fill byte
            i += 1
            continue
        if marker == 0x01 or 0xD0 <= marker <= 0xD8:  # markers without a length
            i += 2
            continue
        # SOF0..SOF15 carry the frame size; C4 (DHT), C8 (JPG) and CC (DAC) do not.
        if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):
            if i + 9 > len(raw):
                return None
            return int.from_bytes(raw[i + 5 : i + 7], "big"), int.from_bytes(
                raw[i + 7 : i + 9], "big"
            )
        i += 2 + int.from_bytes(raw[i + 2 : i + 4], "big")
    return None


def jpeg_reduction(height: int, width: int, spec: Preprocessing) -> int:
    """The largest of 8, 4, 2 by which both sides exceed the resized content (else 1)."""
    if spec.image_size is None:
        return 1
    content = compute_placement(height, width, spec.image_size, spec.resize_mode).content
    return next(
        (r for r in JPEG_REDUCTIONS if height >= r * content[0] and width >= r * content[1]), 1
    )


def read_image_reduced(path: Path, spec: Preprocessing) -> tuple[np.ndarray, tuple[int, int]]:
    """:func:`read_image` of a JPEG at 1/2, 1/4 or 1/8 scale when ``spec`` shrinks it that much.

    Returns the RGB uint8 image and its full-resolution ``(H, W)``; other formats, and JPEGs not
    shrunk at least twofold, are read at full size.
    """
    buffer = _read_bytes_checked(path)
    size = jpeg_size(buffer) if path.suffix.lower() in (".jpg", ".jpeg") else None
    reduction = jpeg_reduction(*size, spec) if size is not None else 1
    if reduction == 1:
        image = _to_rgb(_to_uint8(_decode_buffer(buffer)))
        return image, (image.shape[0], image.shape[1])
    assert size is not None
    # Upright like the full decode: REDUCED_COLOR applies the EXIF orientation too. The header
    # gives the stored size, so a quarter turn swaps it.
    image = cv2.cvtColor(_decode_buffer(buffer, JPEG_REDUCTIONS[reduction]), cv2.COLOR_BGR2RGB)
    height, width = size
    stored = (-(-height // reduction), -(-width // reduction))
    if image.shape[:2] != stored and image.shape[:2] == stored[::-1]:
        size = (width, height)
    return image, size


def _to_uint8(array: np.ndarray) -> np.ndarray:
    if array.dtype == np.uint8:
        return array
    if array.dtype == np.uint16:
        return (array >> _uint16_shift(int(array.max()))).astype(np.uint8)
    if array.dtype == np.bool_:
        return array.astype(np.uint8) * 255
    if np.issubdtype(array.dtype, np.floating):
        scale = 255.0 if float(np.nanmax(array)) <= 1.0 else 1.0
        return np.clip(np.nan_to_num(array) * scale, 0, 255).astype(np.uint8)
    raise DecodeError(f"unsupported pixel type {array.dtype}")


def _uint16_shift(high: int) -> int:
    """The right shift that brings a 16-bit file's values to 8 bits, by the range they use:
    none for 8-bit values saved in 16 bits (at most 255), 4 for 12-bit sensor data (at most
    4095), else 8 (the full 16-bit range)."""
    if high <= 255:
        return 0
    return 4 if high <= 4095 else 8


def read_image(path: Path) -> np.ndarray:
    """An RGB uint8 (H, W, 3) image; grayscale, RGBA and 16-bit files are converted (16-bit by
    the range their values use: 8-bit, 12-bit or 16-bit)."""
    return _to_rgb(_to_uint8(_decode(path)))


def _to_rgb(array: np.ndarray) -> np.ndarray:
    if array.ndim == 2:
        return cv2.cvtColor(array, cv2.COLOR_GRAY2RGB)
    channels = array.shape[2]
    if channels == 1:
        return cv2.cvtColor(array[..., 0], cv2.COLOR_GRAY2RGB)
    if channels == 3:
        return cv2.cvtColor(array, cv2.COLOR_BGR2RGB)
    if channels == 4:
        return cv2.cvtColor(array, cv2.COLOR_BGRA2RGB)
    raise DecodeError(f"unsupported number of channels: {channels}")


def read_mask(path: Path) -> np.ndarray:
    """A binary {0, 1} uint8 (H, W) mask.

    0/1 and 0/255 masks are taken as they are (also when saved in 16 bits), anti-aliased 8-bit
    masks are thresholded at :data:`MASK_THRESHOLD`, 0/65535 masks are scaled to 8 bits first,
    and palette or RGB masks
    (lesion drawn in any colour on black) use their brightest channel.

    Raises:
        DecodeError: the values are ambiguous (e.g. label indices 0..5 instead of 0/255).
    """
    return read_mask_checked(path)[0]


def read_mask_checked(path: Path) -> tuple[np.ndarray, bool]:
    """:func:`read_mask`, and whether grey values (between 0 and 255) were thresholded."""
    array = _decode(path)
    if array.ndim == 3:
        array = array[..., :3].max(axis=2) if array.shape[2] >= 3 else array[..., 0]
    if array.dtype == np.bool_:
        return array.astype(np.uint8), False
    if array.dtype != np.uint8:
        high = int(array.max())
        if high <= 1:
            return (array > 0).astype(np.uint8), False
        array = _to_uint8(array)
    high = int(array.max())
    if high <= 1:
        return array.copy(), False
    if high < MASK_THRESHOLD:
        values = np.unique(array)[:8].tolist()
        raise DecodeError(
            f"mask values {values} are not binary (max {high} < {MASK_THRESHOLD}); expected 0/255 "
            "or 0/1"
        )
    grey = bool(np.any((array > 0) & (array < high)))
    return (array >= MASK_THRESHOLD).astype(np.uint8), grey


def load_pair(
    image_path: Path,
    mask_path: Path,
    preprocessing: Preprocessing | int | None,
    split: str | None = None,
    grey_masks: list[Path] | None = None,
) -> tuple[np.ndarray, np.ndarray] | list[Problem]:
    """Decode, check and preprocess one pair; problems instead of arrays when it is unusable.

    ``preprocessing`` is a :class:`~skinet.imaging.preprocess.Preprocessing`, an ``int`` (plain
    squash to that size) or ``None`` (decode and check only). A mask with grey values is
    thresholded and, when ``grey_masks`` is given, appended to it. A JPEG is read at reduced
    scale (:func:`read_image_reduced`) when the preprocessing asks for ``reduced_decode`` and
    shrinks it enough.
    """
    problems: list[Problem] = []
    image = mask = None
    spec = as_preprocessing(preprocessing) if preprocessing is not None else None
    size: tuple[int, int] | None = None
    try:
        if spec is not None and spec.reduced_decode:
            image, size = read_image_reduced(image_path, spec)
        else:
            image = read_image(image_path)
            size = (image.shape[0], image.shape[1])
    except (DecodeError, OSError) as exc:
        problems.append(Problem(image_path, str(exc), split))
    try:
        mask, grey = read_mask_checked(mask_path)
        if grey and grey_masks is not None:
            grey_masks.append(mask_path)
    except (DecodeError, OSError) as exc:
        problems.append(Problem(mask_path, str(exc), split))
    if image is None or mask is None:
        return problems
    if size != mask.shape:
        assert size is not None
        return [
            Problem(
                mask_path,
                size_mismatch(mask.shape, size, image_path),
                split,
            )
        ]
    if spec is not None:
        image, mask = preprocess_pair(image, mask, spec)
    return image, mask


def load_pair_or_raise(
    image_path: Path,
    mask_path: Path,
    preprocessing: Preprocessing | int | None,
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`load_pair` raising :class:`DatasetError` for a file gone bad since the check."""
    result = load_pair(image_path, mask_path, preprocessing)
    if isinstance(result, list):
        raise DatasetError(result)
    return result


def size_mismatch(mask_shape: tuple[int, ...], image_shape: tuple[int, ...], image: Path) -> str:
    """How a mask of another size than its image is reported, width x height, everywhere."""
    return (
        f"mask size {mask_shape[1]}x{mask_shape[0]} does not match image size "
        f"{image_shape[1]}x{image_shape[0]} ({image.name})"
    )
