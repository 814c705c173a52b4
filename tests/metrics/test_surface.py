"""HD95 and ASSD against values computed by hand, empty masks and the mm scaling.

The 10x10 square A (rows 10-19, columns 10-19) and B = A shifted right by 3 pixels. Both
boundaries are 36-pixel rings. Distances from A's ring to B's (B's to A's is the mirror image):
top and bottom rows 3, 2, 1 then 0 x 7 (they run along B's rows); left column 8 x 3 (to B's left
column); right column 1, 2, 3, 3, 3, 3, 2, 1 (to B's top/bottom rows, or 3 to B's right column).
Sorted: 14 zeros, 4 ones, 4 twos, 14 threes, so the 95th percentile (position 0.95 * 35 = 33.25)
is 3; the sum is 6 + 6 + 24 + 18 = 54 per direction, so ASSD = 108 / 72 = 1.5.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from skinet.metrics.surface import compute_surface_metrics, summarize_surface_metrics

SIZE = 32


def square(col_shift: int = 0) -> np.ndarray:
    mask = np.zeros((SIZE, SIZE), np.uint8)
    mask[10:20, 10 + col_shift : 20 + col_shift] = 255
    return mask


def test_square_against_shifted_square() -> None:
    metrics = compute_surface_metrics(square(3), square())
    assert metrics.hd95_px == 3.0
    assert metrics.assd_px == 1.5
    assert metrics.hd95_mm is None and metrics.assd_mm is None
    # Symmetric in its arguments.
    assert compute_surface_metrics(square(), square(3)) == metrics


def test_isotropic_and_anisotropic_spacing_in_mm() -> None:
    metrics = compute_surface_metrics(square(3), square(), spacing_mm=0.5)
    assert (metrics.hd95_px, metrics.assd_px) == (3.0, 1.5)
    assert (metrics.hd95_mm, metrics.assd_mm) == (1.5, 0.75)
    # Rows 1 mm, columns 0.25 mm apart: the 3-column shift is 0.75 mm, and the right column's
    # nearest point of B is now B's right column (0.75 mm) rather than a row 1 mm away. Per
    # direction: rows 0.75, 0.5, 0.25 (x2), left and right columns 8 x 0.75 each: sum 15.
    anisotropic = compute_surface_metrics(square(3), square(), spacing_mm=(1.0, 0.25))
    assert anisotropic.hd95_mm == pytest.approx(0.75)
    assert anisotropic.assd_mm == pytest.approx(30 / 72)


def test_one_far_outlier_moves_assd_but_not_hd95() -> None:
    pred = square()
    pred[28, 28] = 1  # 37 boundary pixels; the outlier is sqrt(9² + 9²) from corner (19, 19)
    metrics = compute_surface_metrics(pred, square())
    assert metrics.hd95_px == 0.0
    assert metrics.assd_px == pytest.approx(math.hypot(9, 9) / (37 + 36))


def test_identical_and_empty_masks() -> None:
    assert compute_surface_metrics(square(), square(), 0.1).hd95_mm == 0.0
    empty = np.zeros((SIZE, SIZE), np.uint8)
    both_empty = compute_surface_metrics(empty, empty, 0.1)
    assert (both_empty.hd95_px, both_empty.assd_px, both_empty.hd95_mm) == (0.0, 0.0, 0.0)
    for pred, target in ((empty, square()), (square(), empty)):
        one_empty = compute_surface_metrics(pred, target, 0.1)
        assert not one_empty.defined
        assert all(
            math.isnan(v)
            for v in (one_empty.hd95_px, one_empty.assd_px, one_empty.hd95_mm, one_empty.assd_mm)
        )


def test_a_lesion_on_the_image_border_has_a_boundary_there() -> None:
    target = np.ones((8, 8), np.uint8)  # all lesion: the image border is its boundary
    pred = np.zeros((8, 8), np.uint8)
    pred[1:7, 1:7] = 1  # one pixel inside on every side: a 20-pixel ring
    metrics = compute_surface_metrics(pred, target)
    # The 28 border pixels are 1 from the inner ring, its 4 corners sqrt(2); the inner ring is
    # 1 from the border everywhere. P95 of 24 ones and 4 x sqrt(2) (position 25.65) is sqrt(2).
    assert metrics.hd95_px == pytest.approx(math.sqrt(2))
    assert metrics.assd_px == pytest.approx((20 + 24 + 4 * math.sqrt(2)) / 48)


def test_summary_skips_undefined_and_counts_them() -> None:
    empty = np.zeros((SIZE, SIZE), np.uint8)
    metrics = [
        compute_surface_metrics(square(3), square(), 0.5),
        compute_surface_metrics(square(), square(), 0.5),
        compute_surface_metrics(empty, square(), 0.5),
    ]
    summary = summarize_surface_metrics(metrics, with_mm=True)
    assert summary["num_surface_undefined"] == 1
    assert summary["mean_hd95_px"] == 1.5 and summary["mean_assd_mm"] == pytest.approx(0.375)
    assert summarize_surface_metrics(metrics[2:], with_mm=False)["mean_hd95_px"] is None


@pytest.mark.parametrize("spacing", [0.0, -1.0, math.nan, (1.0, 2.0, 3.0)])
def test_bad_spacing_is_rejected(spacing: object) -> None:
    with pytest.raises(ValueError, match="pixel spacing"):
        compute_surface_metrics(square(), square(), spacing)  # type: ignore[arg-type]


def test_shape_mismatch_is_rejected() -> None:
    with pytest.raises(ValueError, match="same"):
        compute_surface_metrics(np.zeros((4, 5)), np.zeros((5, 4)))
