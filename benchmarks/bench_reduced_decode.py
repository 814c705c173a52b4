"""Reduced-scale JPEG decode against full decode: a trained model's validation Jaccard and the time.

Usage::

    python benchmarks/bench_reduced_decode.py --checkpoint runs/<run>/checkpoints/best-*.ckpt
    python benchmarks/bench_reduced_decode.py --checkpoint best.ckpt --data-dir data/ISIC2017

Builds the split twice through the training data path (``build_dataset`` with the checkpoint's
``DATA_CONFIG``, persistent cache off so both decode now), once with
``DATA_CONFIG.reduced_jpeg_decode: false`` and once with ``true``, and scores the checkpoint on
each at the model's input size, as validation does: mean per-image Jaccard at the checkpoint's
threshold. Prints both, their difference (the decision rule for turning reduced decode on by
default is a difference within 0.001), the largest per-image difference, the mean absolute pixel
difference of the preprocessed images and the decode time of each (ratio reduced / full, same
run). Asserts nothing.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

from skinet.checkpoints.read import build_model, load_checkpoint
from skinet.config.experiment import parse_config
from skinet.metrics.masks import compute_mask_metrics
from skinet.training.data.loaders import build_dataset


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkpoint", type=Path, required=True, help="a .ckpt from training")
    parser.add_argument(
        "--data-dir", dest="data", type=Path, help="dataset folder (default: the checkpoint's)"
    )
    parser.add_argument("--split", default="val", choices=("train", "val", "test"))
    parser.add_argument("--batch-size", type=int, default=16)
    return parser


@torch.inference_mode()
def per_image_jaccard(model: torch.nn.Module, dataset, threshold: float, batch_size: int) -> list:
    """Per-image Jaccard of ``model`` on every ``(image, mask)`` of ``dataset``."""
    scores = []
    for start in range(0, len(dataset), batch_size):
        items = [dataset[i] for i in range(start, min(start + batch_size, len(dataset)))]
        images = torch.stack([image for image, _ in items])
        probs = torch.sigmoid(model(images).float())[:, 0].numpy()
        for prob, (_, mask) in zip(probs, items, strict=True):
            pred = (prob >= threshold).astype(np.uint8)
            scores.append(compute_mask_metrics(pred, mask.numpy()[0]).jaccard)
    return scores


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        checkpoint = load_checkpoint(args.checkpoint)
    except (OSError, ValueError) as error:  # missing file, not a SkiNet checkpoint
        parser.error(f"--checkpoint: {error}")
    model = build_model(checkpoint).eval()
    threshold = checkpoint.threshold
    raw = checkpoint.config.to_yaml_dict()
    raw["DATA_CONFIG"]["persistent_cache"] = False
    raw["TRAIN_CONFIG"]["cache_in_ram"] = True  # the decode that reduced_jpeg_decode applies to
    if args.data is not None:
        raw["DATA_CONFIG"]["data_dir"] = str(args.data.resolve())
    results = {}
    for reduced in (False, True):
        raw["DATA_CONFIG"]["reduced_jpeg_decode"] = reduced
        cfg = parse_config(raw, "checkpoint config")
        started = time.perf_counter()
        dataset = build_dataset(cfg, args.split)
        decode_s = time.perf_counter() - started
        scores = per_image_jaccard(model, dataset, threshold, args.batch_size)
        results[reduced] = (scores, decode_s, dataset.images.astype(np.float32))
    (full, full_s, full_px), (red, red_s, red_px) = results[False], results[True]
    diffs = [abs(a - b) for a, b in zip(full, red, strict=True)]
    size = checkpoint.config.data.image_size
    print(
        f"{args.split}: {len(full)} images at {size} px, threshold {threshold:.3f}, "
        f"checkpoint {args.checkpoint}"
    )
    print(f"mean per-image Jaccard, full decode:    {statistics.fmean(full):.4f}")
    print(f"mean per-image Jaccard, reduced decode: {statistics.fmean(red):.4f}")
    print(
        f"difference (reduced - full): {statistics.fmean(red) - statistics.fmean(full):+.4f}; "
        f"largest per-image difference {max(diffs):.4f}"
    )
    pixel_diff = float(np.abs(full_px - red_px).mean())
    print(f"mean absolute pixel difference: {pixel_diff:.3f} grey levels")
    if pixel_diff == 0.0:
        print(
            f"reduced decode changed no pixel: no JPEG of the split is at least twice "
            f"{size} px in both directions, so it does not apply to these images"
        )
    print(f"decode time: full {full_s:.2f} s, reduced {red_s:.2f} s (ratio {red_s / full_s:.2f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
