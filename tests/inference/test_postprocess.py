"""Largest-component and hole-filling post-processing."""

from __future__ import annotations

import numpy as np
import pytest

from skinet.inference.postprocess import fill_holes, keep_largest_component, postprocess_mask


def _two_blobs_with_hole() -> np.ndarray:
    mask = np.zeros((20, 20), np.uint8)
    mask[2:12, 2:12] = 1  # 100 px with a 2x2 hole
    mask[6:8, 6:8] = 0
    mask[15:18, 15:18] = 1  # 9 px
    return mask


def test_keep_largest_component() -> None:
    out = keep_largest_component(_two_blobs_with_hole())
    assert out[16, 16] == 0 and out[3, 3] == 1 and out[6, 6] == 0
    assert out.sum() == 96


def test_fill_holes() -> None:
    out = fill_holes(_two_blobs_with_hole())
    assert out[6:8, 6:8].all() and out[16, 16] == 1
    assert out.sum() == 100 + 9


def test_background_touching_border_is_not_a_hole() -> None:
    mask = np.zeros((10, 10), np.uint8)
    mask[:, 3] = 1  # a wall splitting the background; neither side is enclosed
    np.testing.assert_array_equal(fill_holes(mask), mask)


@pytest.mark.parametrize("keep_largest", [False, True])
@pytest.mark.parametrize("fill", [False, True])
def test_empty_mask_stays_empty(keep_largest: bool, fill: bool) -> None:
    empty = np.zeros((8, 9), np.uint8)
    out = postprocess_mask(empty, keep_largest=keep_largest, fill=fill)
    assert out.shape == (8, 9) and out.dtype == np.uint8 and not out.any()


def test_rejects_non_2d() -> None:
    with pytest.raises(ValueError, match="2-D"):
        fill_holes(np.zeros((4, 4, 3), np.uint8))
