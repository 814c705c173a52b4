"""A few real ISIC 2017 images through the reader (skipped where the shared data is absent)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from skinet.datasets.layouts import assign_splits
from skinet.datasets.registry import read_layout
from skinet.datasets.stats import compute_channel_stats
from skinet.imaging.decode import load_pair

REAL_ROOT = Path(__file__).resolve().parents[2] / ".." / "shared" / "data" / "isic2017"

pytestmark = pytest.mark.skipif(
    not (REAL_ROOT / "ISIC-2017_Training_Data").is_dir(), reason="real ISIC 2017 data absent"
)


def test_real_isic2017_reads_and_decodes() -> None:
    index = read_layout(REAL_ROOT, "isic2017")
    assert index.problems == []
    assert len(index.splits["train"]) == 1800 and len(index.splits["val"]) == 121
    assert "test" not in index.splits
    splits = assign_splits(index, seed=42, val_fraction=0.15, test_fraction=0.15)
    assert len(splits["test"]) == 270 and len(splits["val"]) == 121
    for sample in index.splits["train"][:3] + index.splits["val"][:2]:
        result = load_pair(sample.image_path, sample.mask_path, 64)
        assert not isinstance(result, list), result
        image, mask = result
        assert image.shape == (64, 64, 3) and set(np.unique(mask).tolist()) <= {0, 1}
        assert 0 < mask.mean() < 1


def test_isic2017_constants_match_a_sample() -> None:
    from skinet.config.data import ISIC2017_MEAN, ISIC2017_STD

    paths = [s.image_path for s in read_layout(REAL_ROOT, "isic2017").splits["train"][::90]]
    stats = compute_channel_stats(paths, threads=2, progress=False)
    assert np.allclose(stats.mean, ISIC2017_MEAN, atol=0.05)
    assert np.allclose(stats.std, ISIC2017_STD, atol=0.05)
