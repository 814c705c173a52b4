"""Decoding images and masks into the canonical form: RGB uint8 and binary {0, 1} uint8.

Unusual but unambiguous inputs are converted (grayscale/RGBA/16-bit images, 0/1, anti-aliased,
palette or RGB masks); anything else becomes a :class:`~skinet.data.errors.Problem` naming the
file, so a dataset check can report every bad file at once.
"""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np

from skinet.data.errors import DatasetError, Problem
from skinet.data.preprocess import Preprocessing, as_preprocessing, preprocess_pair
from skinet.data.preprocess import resize_image as resize_image  # importable from here as before

MASK_THRESHOLD = 128
"""Anti-aliased 8-bit masks are binarised at this value."""


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


def _decode(path: Path) -> np.ndarray:
    buffer = _read_bytes_checked(path)
    # IMREAD_UNCHANGED ignores the EXIF orientation; ANYDEPTH | ANYCOLOR keeps 16 bits and
    # greyscale but rotates the pixels upright (alpha is dropped; nothing here uses it).
    array = cv2.imdecode(buffer, cv2.IMREAD_ANYDEPTH | cv2.IMREAD_ANYCOLOR)
    if array is None or array.size == 0:
        raise DecodeError("cannot decode (corrupt or unsupported format)")
    return array


def _to_uint8(array: np.ndarray) -> np.ndarray:
    if array.dtype == np.uint8:
        return array
    if array.dtype == np.uint16:
        return (array >> 8).astype(np.uint8)
    if array.dtype == np.bool_:
        return array.astype(np.uint8) * 255
    if np.issubdtype(array.dtype, np.floating):
        scale = 255.0 if float(np.nanmax(array)) <= 1.0 else 1.0
        return np.clip(np.nan_to_num(array) * scale, 0, 255).astype(np.uint8)
    raise DecodeError(f"unsupported pixel type {array.dtype}")


def read_image(path: Path) -> np.ndarray:
    """An RGB uint8 (H, W, 3) image; grayscale, RGBA and 16-bit files are converted."""
    array = _to_uint8(_decode(path))
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

    0/1 and 0/255 masks are taken as they are, anti-aliased 8-bit masks are thresholded at
    :data:`MASK_THRESHOLD`, 16-bit masks are scaled to 8 bits first, and palette or RGB masks
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

    ``preprocessing`` is a :class:`~skinet.data.preprocess.Preprocessing`, an ``int`` (plain
    squash to that size) or ``None`` (decode and check only). A mask with grey values is
    thresholded and, when ``grey_masks`` is given, appended to it.
    """
    problems: list[Problem] = []
    image = mask = None
    try:
        image = read_image(image_path)
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
    if image.shape[:2] != mask.shape:
        return [
            Problem(
                mask_path,
                f"mask size {mask.shape[1]}x{mask.shape[0]} does not match image size "
                f"{image.shape[1]}x{image.shape[0]} ({image_path.name})",
                split,
            )
        ]
    if preprocessing is not None:
        image, mask = preprocess_pair(image, mask, as_preprocessing(preprocessing))
    return image, mask


def load_pair_or_raise(
    image_path: Path, mask_path: Path, preprocessing: Preprocessing | int | None
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`load_pair` raising :class:`DatasetError` for a file gone bad since the check."""
    result = load_pair(image_path, mask_path, preprocessing)
    if isinstance(result, list):
        raise DatasetError(result)
    return result
