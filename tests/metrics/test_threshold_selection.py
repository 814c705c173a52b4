"""How a sweep chooses its threshold: pooled Dice, mean per-image Jaccard, or guarded."""

from __future__ import annotations

import pytest
import torch

from skinet.metrics.threshold_counts import (
    GUARD_MIN_IMAGES,
    guard_interval,
    is_clear_gain,
    per_image_jaccard,
    pooled_dice,
    select_threshold,
)
from skinet.metrics.thresholds import ThresholdSweep

GRID = torch.tensor([0.9, 0.7, 0.5, 0.3, 0.1])


def _counts(rows: list[list[tuple[int, int, int]]]) -> torch.Tensor:
    """``(N, T, 3)`` counts from per-image lists of ``(tp, fp, fn)`` per threshold."""
    return torch.tensor(rows, dtype=torch.long)


def test_per_image_is_not_dominated_by_one_large_lesion() -> None:
    # One large lesion is best at 0.1; three small ones are best at 0.7.
    large = [(100, 0, 900), (300, 0, 700), (500, 0, 500), (800, 0, 200), (1000, 0, 0)]
    small = [(8, 0, 2), (10, 0, 0), (10, 5, 0), (10, 10, 0), (10, 20, 0)]
    counts = _counts([large, small, small, small])
    dice = pooled_dice(counts)
    assert GRID[select_threshold(dice, counts, GRID, "pooled_dice")] == pytest.approx(0.1)
    assert GRID[select_threshold(dice, counts, GRID, "per_image")] == pytest.approx(0.7)


def test_guarded_keeps_the_reference_unless_the_gain_is_clear() -> None:
    # On three images 0.3 beats 0.5 on two and loses on one: best on average, not clearly.
    unclear = _counts(
        [
            [(5, 5, 5), (6, 4, 4), (7, 3, 3), (9, 1, 1), (8, 5, 2)],
            [(5, 5, 5), (6, 4, 4), (7, 3, 3), (9, 1, 1), (8, 5, 2)],
            [(5, 5, 5), (6, 4, 4), (9, 1, 1), (7, 3, 3), (7, 6, 3)],
        ]
    )
    dice = pooled_dice(unclear)
    assert GRID[select_threshold(dice, unclear, GRID, "per_image")] == pytest.approx(0.3)
    assert GRID[select_threshold(dice, unclear, GRID, "guarded", 0.5)] == pytest.approx(0.5)
    # The same gain on 30 images of which none loses: clear.
    clear = _counts([[(5, 5, 5), (6, 4, 4), (7, 3, 3), (9, 1, 1), (8, 5, 2)]] * 30)
    assert GRID[select_threshold(pooled_dice(clear), clear, GRID, "guarded", 0.5)] == (
        pytest.approx(0.3)
    )
    with pytest.raises(ValueError, match="not among the candidates"):
        select_threshold(dice, unclear, GRID, "guarded", 0.42)


def test_a_gain_on_fewer_than_six_images_is_never_clear() -> None:
    """Every image gaining is no clear gain on five (by chance 1 in 32) and on one (where the
    bootstrap interval has no width): the reference is kept, and flips are not chosen."""
    from skinet.evaluation.tuning import TunedThreshold, judge_flips

    gain_row = [(5, 5, 5), (6, 4, 4), (7, 3, 3), (9, 1, 1), (8, 5, 2)]
    for n in (1, GUARD_MIN_IMAGES - 1):
        few = _counts([gain_row] * n)
        assert guard_interval(per_image_jaccard(few)[:, 3] - per_image_jaccard(few)[:, 2])[0] > 0
        assert GRID[select_threshold(pooled_dice(few), few, GRID, "guarded", 0.5)] == (
            pytest.approx(0.5)
        )
    enough = _counts([gain_row] * GUARD_MIN_IMAGES)
    assert GRID[select_threshold(pooled_dice(enough), enough, GRID, "guarded", 0.5)] == (
        pytest.approx(0.3)
    )
    assert not is_clear_gain(torch.full((GUARD_MIN_IMAGES - 1,), 0.1))
    assert is_clear_gain(torch.full((GUARD_MIN_IMAGES,), 0.1))
    for n, use in ((1, False), (GUARD_MIN_IMAGES - 1, False), (GUARD_MIN_IMAGES, True)):
        plain = TunedThreshold(0.5, 0.8, n, per_image_jaccard=(0.7,) * n)
        flipped = TunedThreshold(0.5, 0.9, n, per_image_jaccard=(0.8,) * n)
        choice = judge_flips(plain, flipped)
        assert choice.use is use and choice.gain == pytest.approx(0.1)
    with pytest.raises(ValueError, match="tuned on 3 images without them and on 2 with them"):
        judge_flips(
            TunedThreshold(0.5, 0.8, 3, per_image_jaccard=(0.7,) * 3),
            TunedThreshold(0.5, 0.8, 2, per_image_jaccard=(0.7,) * 2),
        )


def test_ties_go_to_the_highest_threshold_and_empty_images_score_one() -> None:
    empty = _counts([[(0, 0, 0)] * 5, [(0, 0, 0), (0, 0, 0), (0, 3, 0), (0, 5, 0), (0, 9, 0)]])
    assert per_image_jaccard(empty)[0].tolist() == [1.0] * 5
    assert pooled_dice(empty)[0] == 1.0
    for selection in ("pooled_dice", "per_image"):
        assert select_threshold(pooled_dice(empty), empty, GRID, selection) == 0


def test_the_sweep_and_the_rule_choose_alike() -> None:
    torch.manual_seed(0)
    probs = torch.rand(6, 1, 16, 16)
    masks = (torch.rand(6, 1, 16, 16) > 0.6).float()
    for selection, reference in (("pooled_dice", None), ("per_image", None), ("guarded", 0.46)):
        sweep = ThresholdSweep(selection=selection, reference=reference)
        sweep.update(probs, masks)
        result = sweep.compute()
        counts = torch.cat(sweep.per_image)[:, sweep.candidate_index]
        thresholds = sweep.grid[sweep.candidate_index]
        best = select_threshold(pooled_dice(counts), counts, thresholds, selection, reference)
        assert float(result.optimal_threshold) == pytest.approx(float(thresholds[best]))
    with pytest.raises(ValueError, match="reference"):
        ThresholdSweep(selection="guarded")
