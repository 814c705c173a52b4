"""Helpers of the inference tests: files, checkpoints and the CLI."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import torch


def rewrite_checkpoint(source: Path, target: Path, **skinet_entries: Any) -> Path:
    """Copy a checkpoint, replacing entries of ``checkpoint["skinet"]``."""
    checkpoint = torch.load(source, map_location="cpu", weights_only=True)
    checkpoint["skinet"].update(skinet_entries)
    torch.save(checkpoint, target)
    return target


def another_source_model(source: Path, target: Path) -> Path:
    """Copy a checkpoint with one weight changed: another model, in a file of its own."""
    checkpoint = torch.load(source, map_location="cpu", weights_only=True)
    name = next(iter(checkpoint["state_dict"]))
    checkpoint["state_dict"][name] = checkpoint["state_dict"][name] + 0.01
    torch.save(checkpoint, target)
    return target


def write_rgb(path: Path, height: int, width: int, seed: int = 0) -> np.ndarray:
    """A random RGB image with a bright blob, written to ``path``; returns the pixels."""
    rng = np.random.default_rng(seed)
    image = rng.integers(0, 80, (height, width, 3), dtype=np.uint8)
    cv2.circle(
        image, (width // 2, height // 2), max(2, min(height, width) // 4), (220, 180, 160), -1
    )
    assert cv2.imwrite(str(path), cv2.cvtColor(image, cv2.COLOR_RGB2BGR))
    return image


def write_mask(path: Path, mask: np.ndarray) -> None:
    """Write a {0, 1} mask as a 0/255 PNG."""
    assert cv2.imwrite(str(path), (mask > 0).astype(np.uint8) * 255)


def run_cli(argv: Sequence[str]) -> int:
    """Run a subcommand through the ``skinet`` console entry point."""
    from skinet.cli.main import main

    return main(list(argv))
