"""Dermoscopy-like synthetic images and masks in the official ISIC 2017 layout.

Used by tests, examples and benchmarks so nothing needs the real (licensed) archives. Each image
holds one irregular pigmented lesion with a fuzzy border, darker centre and globules, on textured
skin with a few hairs and a dark circular vignette; its mask is the lesion region (0/255 PNG).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import cv2
import numpy as np

from skinet.datasets.layouts import ISIC2017_FOLDERS

logger = logging.getLogger(__name__)

COMPLETE_MARKER = ".skinet_synthetic_complete.json"
"""Written last; a folder without it is treated as absent (an interrupted generation)."""

SPLIT_FOLDERS = ISIC2017_FOLDERS
"""The official ISIC 2017 folders, so the ISIC 2017 reader serves synthetic data unchanged."""

# BGR skin tones (light to medium-dark) and lesion browns (tan to near black).
_SKIN_TONES = np.array(
    [
        [170, 185, 225],
        [180, 200, 230],
        [140, 160, 200],
        [200, 215, 240],
        [215, 200, 190],
        [150, 170, 215],
        [185, 195, 225],
    ],
    dtype=np.float32,
)
_LESION_BROWNS = np.array(
    [[70, 95, 150], [55, 70, 110], [45, 50, 70], [90, 120, 185], [70, 88, 130], [55, 66, 98]],
    dtype=np.float32,
)


def is_complete(root: str | Path) -> bool:
    """Whether ``root`` holds a fully written synthetic dataset."""
    return (Path(root) / COMPLETE_MARKER).is_file()


def make_synthetic_dataset(
    root: str | Path,
    num_train: int,
    num_val: int,
    num_test: int,
    image_size: int,
    seed: int,
) -> Path:
    """Write a deterministic synthetic dataset in the official ISIC 2017 layout.

    Images are ``ISIC_XXXXXXX.jpg`` (RGB), masks ``ISIC_XXXXXXX_segmentation.png`` (0/255). The
    splits are generated in a temporary folder next to ``root`` and moved in; a completion marker
    is written last, so an interrupted run is never mistaken for a complete dataset. A folder
    already complete with the same parameters is left alone.

    Returns:
        ``root``.
    """
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    params = {
        "num_train": num_train,
        "num_val": num_val,
        "num_test": num_test,
        "image_size": image_size,
        "seed": seed,
    }
    with _lock(root):
        marker = root / COMPLETE_MARKER
        made = json.loads(marker.read_text()) if marker.is_file() else None
        if made == params:
            return root
        if made is not None:
            changed = ", ".join(
                f"{k} {made.get(k)} -> {v}" for k, v in params.items() if made.get(k) != v
            )
            logger.info("synthetic dataset in %s made again with other settings: %s", root, changed)
        marker.unlink(missing_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=".synthetic-tmp-", dir=root))
        try:
            counts = {"train": num_train, "val": num_val, "test": num_test}
            first_id = 0
            for split_index, (split, count) in enumerate(counts.items()):
                image_dir, mask_dir = (tmp / name for name in SPLIT_FOLDERS[split])
                image_dir.mkdir()
                mask_dir.mkdir()
                for i in range(count):
                    rng = np.random.default_rng([seed, split_index, i])
                    image, mask = make_synthetic_sample(rng, image_size)
                    stem = f"ISIC_{first_id + i:07d}"
                    cv2.imwrite(
                        str(image_dir / f"{stem}.jpg"), image, [cv2.IMWRITE_JPEG_QUALITY, 92]
                    )
                    cv2.imwrite(str(mask_dir / f"{stem}_segmentation.png"), mask)
                first_id += count
            for image_name, mask_name in SPLIT_FOLDERS.values():
                for name in (image_name, mask_name):
                    shutil.rmtree(root / name, ignore_errors=True)
                    os.replace(tmp / name, root / name)
            marker.write_text(json.dumps(params))
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return root


@contextlib.contextmanager
def _lock(root: Path) -> Iterator[None]:
    """Serialise generators writing the same folder (e.g. several DDP ranks)."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows: no cross-process lock
        yield
        return
    with open(root / ".synthetic.lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _smooth_noise(rng: np.random.Generator, size: int, cells: int) -> np.ndarray:
    """Low-frequency noise in about [-1, 1]: a random ``cells x cells`` grid upsampled."""
    grid = rng.standard_normal((cells, cells)).astype(np.float32)
    return cv2.resize(grid, (size, size), interpolation=cv2.INTER_CUBIC)


def make_synthetic_sample(rng: np.random.Generator, size: int) -> tuple[np.ndarray, np.ndarray]:
    """One BGR uint8 image (size, size, 3) and its 0/255 uint8 mask (size, size)."""
    s = float(size)
    yy, xx = np.mgrid[0:size, 0:size].astype(np.float32)

    # Skin: a base tone, slow shading, mottling and fine grain.
    skin = _SKIN_TONES[rng.integers(len(_SKIN_TONES))] + rng.normal(0, 8, 3).astype(np.float32)
    image = np.empty((size, size, 3), np.float32)
    image[:] = skin
    shade = 1.0 + 0.06 * _smooth_noise(rng, size, 3) + 0.03 * _smooth_noise(rng, size, 9)
    image *= shade[..., None]
    image += rng.normal(0, 3.0, (size, size, 1)).astype(np.float32)

    # Lesion shape: polar radius with low-order harmonics plus satellite blobs.
    cx, cy = (rng.uniform(0.35, 0.65, 2) * s).astype(np.float32)
    radius = rng.uniform(0.12, 0.3) * s
    dx, dy = xx - cx, yy - cy
    aspect = rng.uniform(0.7, 1.0)
    cos_a, sin_a = float(np.cos(angle := rng.uniform(0, np.pi))), float(np.sin(angle))
    rot_x = dx * cos_a + dy * sin_a
    rot_y = (dy * cos_a - dx * sin_a) / aspect
    rho = np.hypot(rot_x, rot_y)
    theta = np.arctan2(rot_y, rot_x)
    r_theta = np.ones_like(theta)
    for k in range(2, 7):
        r_theta += rng.uniform(0.02, 0.14) / (k / 2) * np.cos(k * theta + rng.uniform(0, 2 * np.pi))
    shape = (rho / radius - r_theta).astype(np.float32)  # < 0 inside
    for _ in range(rng.integers(1, 4)):
        phi = rng.uniform(0, 2 * np.pi)
        dist = radius * rng.uniform(0.5, 0.9)
        bx, by = cx + dist * np.cos(phi), cy + dist * np.sin(phi)
        br = radius * rng.uniform(0.3, 0.55)
        shape = np.minimum(shape, np.hypot(xx - bx, yy - by) / br - 1.0)
    shape += 0.08 * _smooth_noise(rng, size, 12)  # ragged edge
    fuzz = rng.uniform(0.04, 0.12)
    alpha = 1.0 / (1.0 + np.exp(shape / fuzz * 1.0))  # soft border; 0.5 at the mask boundary
    mask = (shape < 0).astype(np.uint8) * 255

    # Lesion colour: a brown, darker towards the centre, with mottling and dark globules.
    brown = _LESION_BROWNS[rng.integers(len(_LESION_BROWNS))] * rng.uniform(0.85, 1.15)
    centre = np.clip(1.0 - rho / (radius * 1.1), 0, 1)[..., None]
    darkening = rng.uniform(0.35, 0.7)
    lesion = brown * (1.0 - darkening * centre)
    mottling = 0.15 * _smooth_noise(rng, size, 7) + 0.08 * _smooth_noise(
        rng, size, max(8, size // 10)
    )
    lesion = lesion * (1.0 + mottling[..., None])
    globules = np.zeros((size, size), np.float32)
    for _ in range(rng.integers(3, 15)):
        phi, dist = rng.uniform(0, 2 * np.pi), radius * rng.uniform(0.0, 0.8)
        gx, gy = int(cx + dist * np.cos(phi)), int(cy + dist * np.sin(phi))
        cv2.circle(globules, (gx, gy), max(1, int(s * rng.uniform(0.004, 0.014))), 1.0, -1)
    blurred_globules = cv2.GaussianBlur(globules, (0, 0), max(0.6, s / 300))
    lesion *= 1.0 - 0.45 * blurred_globules[..., None]
    alpha = alpha * rng.uniform(0.8, 1.0)
    image = image * (1 - alpha[..., None]) + lesion * alpha[..., None]

    # Hairs: dark, thin quadratic curves across the whole field.
    hair_layer = np.zeros((size, size), np.uint8)
    for _ in range(rng.integers(0, 6) if rng.random() < 0.7 else 0):
        p0, p1, p2 = rng.uniform(-0.1, 1.1, (3, 2)) * s
        t = np.linspace(0, 1, 40)[:, None]
        curve = (1 - t) ** 2 * p0 + 2 * (1 - t) * t * p1 + t**2 * p2
        thickness = 1 if size < 384 or rng.random() < 0.6 else 2
        cv2.polylines(hair_layer, [curve.astype(np.int32)], False, 255, thickness, cv2.LINE_AA)
    hair_alpha = (hair_layer.astype(np.float32) / 255.0 * rng.uniform(0.5, 0.85))[..., None]
    hair_colour = np.array([35, 40, 50], np.float32) * rng.uniform(0.5, 1.5)
    image = image * (1 - hair_alpha) + hair_colour * hair_alpha

    # Dark circular vignette of the dermatoscope at the corners (most images).
    if rng.random() < 0.75:
        vr = rng.uniform(0.62, 0.78) * s
        edge = np.clip((np.hypot(xx - s / 2, yy - s / 2) - vr) / (0.04 * s), 0, 1)[..., None]
        image = image * (1 - 0.92 * edge)

    image = cv2.GaussianBlur(image, (0, 0), max(0.5, s / 400))
    return np.clip(image, 0, 255).astype(np.uint8), mask
