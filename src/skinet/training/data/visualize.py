"""A PNG grid of augmented training samples with their mask contours."""

from __future__ import annotations

import copy
import math
import random
from pathlib import Path

import cv2
import numpy as np
import torch

from skinet.training.data.dataset import SegmentationDataset

CONTOUR_RGB = (0, 255, 0)


def visualize_augmented_data(
    dataset: SegmentationDataset,
    out_path: str | Path,
    num_samples: int = 16,
    ncols: int = 4,
    tile_size: int | None = None,
) -> Path:
    """Write augmented samples of ``dataset`` as a grid with lesion contours drawn in green.

    Every RNG training depends on is left exactly as it was: Python ``random``, NumPy, torch
    (CPU, and CUDA when CUDA is already initialised) states are restored in a ``finally``, and
    the dataset's own augmentation pipeline is replaced by a copy while drawing, so its seeded
    stream is not advanced either. CUDA is never initialised here: drawing runs on the CPU and
    cannot advance a CUDA generator, and initialising it before the ``Trainer`` starts breaks
    fork-based DDP (``ddp_fork``, ``ddp_notebook``).

    Args:
        dataset: Usually the training dataset (with its augmentations).
        out_path: PNG file to write; parent folders are created.
        num_samples: Samples shown, spread evenly over the dataset.
        ncols: Tiles per row.
        tile_size: Side of each tile in pixels; ``None`` keeps the dataset's ``image_size``.

    Returns:
        ``out_path``.
    """
    out_path = Path(out_path)
    py_state = random.getstate()
    np_state = np.random.get_state()
    torch_state = torch.get_rng_state()
    cuda_states = torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else None
    original_transform = dataset.transform
    try:
        dataset.transform = copy.deepcopy(original_transform)
        count = min(num_samples, len(dataset))
        if count == 0:
            raise ValueError("cannot visualise an empty dataset")
        indices = np.linspace(0, len(dataset) - 1, count).round().astype(int)
        tiles = [_render_tile(dataset, int(i), tile_size) for i in indices]
        ncols = max(1, min(ncols, count))
        nrows = math.ceil(count / ncols)
        side = tiles[0].shape[0]
        grid = np.full((nrows * side, ncols * side, 3), 255, np.uint8)
        for k, tile in enumerate(tiles):
            row, col = divmod(k, ncols)
            grid[row * side : (row + 1) * side, col * side : (col + 1) * side] = tile
        out_path.parent.mkdir(parents=True, exist_ok=True)
        if not cv2.imwrite(str(out_path), cv2.cvtColor(grid, cv2.COLOR_RGB2BGR)):
            raise OSError(f"could not write {out_path}")
    finally:
        dataset.transform = original_transform
        random.setstate(py_state)
        np.random.set_state(np_state)
        torch.set_rng_state(torch_state)
        if cuda_states is not None:
            torch.cuda.set_rng_state_all(cuda_states)
    return out_path


def _render_tile(dataset: SegmentationDataset, index: int, tile_size: int | None) -> np.ndarray:
    image, mask = dataset[index]
    rgb = np.ascontiguousarray(dataset.normalizer.denormalize(image.numpy()))
    binary = (mask.numpy()[0] > 0.5).astype(np.uint8)
    if tile_size is not None and tile_size != rgb.shape[0]:
        rgb = cv2.resize(rgb, (tile_size, tile_size), interpolation=cv2.INTER_AREA)
        binary = cv2.resize(binary, (tile_size, tile_size), interpolation=cv2.INTER_NEAREST)
    contours, _ = cv2.findContours(binary, cv2.RETR_EXTERNAL, cv2.CHAIN_APPROX_NONE)
    cv2.drawContours(rgb, contours, -1, CONTOUR_RGB, max(1, rgb.shape[0] // 128))
    return rgb
