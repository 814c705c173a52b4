"""Segment an image with a model from ``skinet export --format onnx``, without SkiNet installed.

Everything the model needs is read from the JSON sidecar written next to the ``.onnx`` file:
dark-border crop, resize mode, colour constancy, letterbox padding, normalisation and threshold.
Needs only numpy, OpenCV and onnxruntime::

    python onnx_predict.py model.onnx image.jpg mask.png [--proba proba.npy]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import cv2
import numpy as np
import onnxruntime as ort


def resize(image: np.ndarray, height: int, width: int) -> np.ndarray:
    """Area interpolation when shrinking, linear when enlarging (as in training)."""
    if image.shape[:2] == (height, width):
        return image
    shrink = height < image.shape[0] or width < image.shape[1]
    interpolation = cv2.INTER_AREA if shrink else cv2.INTER_LINEAR
    return cv2.resize(image, (width, height), interpolation=interpolation)


def shades_of_gray(image: np.ndarray, power: float) -> np.ndarray:
    """Minkowski p-norm white balance of an RGB uint8 image."""
    pixels = image.reshape(-1, 3).astype(np.float64) / 255.0
    illuminant = np.power(np.mean(np.power(pixels, power), axis=0), 1.0 / power)
    norm = float(np.sqrt(np.sum(np.square(illuminant))))
    if norm <= 0.0 or not np.all(illuminant > 0):
        return image.copy()
    gains = norm / (np.sqrt(3.0) * illuminant)
    return np.clip(np.floor(image.astype(np.float64) * gains + 0.5), 0, 255).astype(np.uint8)


def dark_border(image: np.ndarray, rule: dict) -> tuple[int, int, int, int]:
    """(top, left, height, width) of the image inside its dark border."""
    height, width = image.shape[:2]
    dark = image.max(axis=2) <= rule["dark_level"]
    rows = np.flatnonzero(dark.mean(axis=1) < rule["border_share"])
    cols = np.flatnonzero(dark.mean(axis=0) < rule["border_share"])
    if rows.size == 0 or cols.size == 0:
        return 0, 0, height, width
    top, bottom, left, right = rows[0], rows[-1] + 1, cols[0], cols[-1] + 1
    if bottom - top < rule["min_share"] * height or right - left < rule["min_share"] * width:
        return 0, 0, height, width
    return int(top), int(left), int(bottom - top), int(right - left)


def preprocess(image: np.ndarray, sidecar: dict) -> tuple[np.ndarray, tuple[int, int, int, int]]:
    """RGB uint8 (H, W, 3) -> float32 (1, 3, S, S) model input and (top, left, h, w)."""
    steps, size = sidecar["preprocessing"], sidecar["image_size"]
    height, width = image.shape[:2]
    if steps["resize_mode"] == "letterbox":
        scale = size / max(height, width)
        h, w = max(1, int(height * scale + 0.5)), max(1, int(width * scale + 0.5))
    else:
        h, w = size, size
    content = resize(image, h, w)
    if steps["color_constancy"]["method"] == "shades_of_gray":
        content = shades_of_gray(content, steps["color_constancy"]["power"])
    top, left = (size - h) // 2, (size - w) // 2
    canvas = np.full((size, size, 3), steps["pad"]["value"] or 0, np.uint8)
    canvas[top : top + h, left : left + w] = content
    pixels = canvas.astype(np.float32) / np.float32(255)
    if sidecar["normalization_mode"] == "standard":
        mean, std = np.float32(sidecar["mean"]), np.float32(sidecar["std"])
    else:
        mean, std = pixels.mean(axis=(0, 1)), pixels.std(axis=(0, 1))
    pixels = (pixels - mean) / np.maximum(std, np.float32(1e-6))
    return pixels.transpose(2, 0, 1)[None].astype(np.float32), (top, left, h, w)


def predict_proba(model_path: Path, image: np.ndarray) -> tuple[np.ndarray, float]:
    """Probability map float32 (H, W) at the image's own size, and the sidecar's threshold."""
    sidecar = json.loads(model_path.with_name(model_path.name + ".json").read_text())
    crop = sidecar["preprocessing"].get("crop_dark_border", {"enabled": False})
    crop_top, crop_left, height, width = 0, 0, *image.shape[:2]
    if crop["enabled"]:
        crop_top, crop_left, height, width = dark_border(image, crop)
    window = image[crop_top : crop_top + height, crop_left : crop_left + width]
    batch, (top, left, h, w) = preprocess(window, sidecar)
    session = ort.InferenceSession(str(model_path), providers=["CPUExecutionProvider"])
    # "tta": the calibration chose flips: the mean over the image and its flips, each flipped back.
    views = [(), (3,), (2,), (2, 3)] if sidecar.get("tta") else [()]
    maps = []
    for axes in views:
        view = np.ascontiguousarray(np.flip(batch, axes)) if axes else batch
        (out,) = session.run([sidecar["output"]["name"]], {sidecar["input"]["name"]: view})
        maps.append(np.flip(out, axes) if axes else out)
    probs = np.mean(maps, axis=0)
    content = np.ascontiguousarray(probs[0, 0, top : top + h, left : left + w])
    if content.shape != (height, width):
        content = cv2.resize(content, (width, height), interpolation=cv2.INTER_LINEAR)
    out = np.zeros(image.shape[:2], np.float32)
    out[crop_top : crop_top + height, crop_left : crop_left + width] = content
    return np.clip(out, 0.0, 1.0), float(sidecar["threshold"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", type=Path, help="exported .onnx file (sidecar next to it)")
    parser.add_argument("image", type=Path, help="RGB image to segment")
    parser.add_argument("mask", type=Path, help="output mask PNG (0/255)")
    parser.add_argument("--proba", type=Path, default=None, help="also save probabilities .npy")
    args = parser.parse_args()
    bgr = cv2.imread(str(args.image), cv2.IMREAD_COLOR)
    if bgr is None:
        raise SystemExit(f"cannot read {args.image}")
    probs, threshold = predict_proba(args.model, cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB))
    if not cv2.imwrite(str(args.mask), (probs >= threshold).astype(np.uint8) * 255):
        raise SystemExit(f"cannot write {args.mask}: does its folder exist?")
    if args.proba is not None:
        np.save(args.proba, probs.astype(np.float32))


if __name__ == "__main__":
    main()
