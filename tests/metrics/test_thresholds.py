"""Threshold sweep: the streaming metric equals the broadcast reference exactly."""

from __future__ import annotations

from dataclasses import fields

import pytest
import torch

from skinet.metrics.thresholds import (
    THRESHOLDS,
    ThresholdResult,
    ThresholdSweep,
    compute_threshold_counts,
    find_best_threshold,
)


def assert_identical(a: ThresholdResult, b: ThresholdResult) -> None:
    for f in fields(ThresholdResult):
        x, y = getattr(a, f.name), getattr(b, f.name)
        assert x.dtype == y.dtype and x.shape == y.shape, f.name
        assert torch.equal(x, y), f"{f.name}: {x} != {y}"


Batches = list[tuple[torch.Tensor, torch.Tensor]]


def make_batches(seed: int, num_batches: int = 4, dtype: torch.dtype = torch.float32) -> Batches:
    """Batches of random size whose probs hit every threshold and its float32 neighbours."""
    gen = torch.Generator().manual_seed(seed)
    exact = torch.cat(
        [
            THRESHOLDS,
            torch.nextafter(THRESHOLDS, torch.tensor(2.0)).clamp(max=1.0),
            torch.nextafter(THRESHOLDS, torch.tensor(-1.0)).clamp(min=0.0),
        ]
    )
    h, w = (int(v) for v in torch.randint(8, 20, (2,), generator=gen))
    batches = []
    for _ in range(num_batches):
        b = int(torch.randint(1, 5, (1,), generator=gen))
        masks = torch.rand(b, 1, h, w, generator=gen) < 0.3
        probs = (0.5 * masks + 0.6 * torch.rand(b, 1, h, w, generator=gen)).clamp(0, 1)
        flat = probs.view(-1)
        pos = torch.randperm(flat.numel(), generator=gen)[: min(exact.numel(), flat.numel())]
        flat[pos] = exact[: pos.numel()]
        flat[pos[:2]] = torch.tensor([0.5, 0.98])[: pos[:2].numel()]
        batches.append((probs.to(dtype), masks))
    return batches


def run_sweep(batches: Batches, **kwargs: object) -> ThresholdResult:
    metric = ThresholdSweep(**kwargs)  # type: ignore[arg-type]
    for probs, masks in batches:
        metric.update(probs, masks)
    return metric.compute()


def reference(batches: Batches, **kwargs: object) -> ThresholdResult:
    probs = torch.cat([p for p, _ in batches])
    masks = torch.cat([m for _, m in batches])
    return find_best_threshold(probs, masks, **kwargs)  # type: ignore[arg-type]


def test_thresholds_grid() -> None:
    assert THRESHOLDS.dtype == torch.float32 and THRESHOLDS.shape == (51,)
    assert THRESHOLDS[0] == 1.0 and THRESHOLDS[-1] == 0.0 and THRESHOLDS[25] == 0.5
    assert (THRESHOLDS[1:] < THRESHOLDS[:-1]).all()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
def test_counts_match_ge_comparison_on_exact_threshold_values(dtype: torch.dtype) -> None:
    probs = torch.cat(
        [
            THRESHOLDS,
            torch.nextafter(THRESHOLDS, torch.tensor(2.0)),
            torch.nextafter(THRESHOLDS, torch.tensor(-1.0)),
            torch.tensor([0.5, 0.98, 0.0, 1.0, 0.02, 0.3]),
        ]
    ).clamp(0, 1)
    probs = probs.to(dtype)[None].repeat(2, 1)
    masks = torch.rand(probs.shape, generator=torch.Generator().manual_seed(0)) > 0.5
    counts = compute_threshold_counts(probs, masks, THRESHOLDS)
    cmp = torch.promote_types(dtype, torch.float32)
    preds = probs.to(cmp)[:, None] >= THRESHOLDS.to(cmp)[None, :, None]  # (B, T, P)
    tp = (preds & masks[:, None]).sum(-1)
    fp = (preds & ~masks[:, None]).sum(-1)
    fn = (~preds & masks[:, None]).sum(-1)
    assert torch.equal(counts, torch.stack([tp, fp, fn], dim=-1))


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_streaming_equals_broadcast_exactly(seed: int, dtype: torch.dtype) -> None:
    batches = make_batches(seed, dtype=dtype)
    assert_identical(run_sweep(batches), reference(batches))


def test_custom_thresholds_without_half_still_report_dice_at_05() -> None:
    batches = make_batches(7)
    custom = torch.tensor([0.9, 0.7, 0.3, 0.1])
    streamed, ref = run_sweep(batches, thresholds=custom), reference(batches, thresholds=custom)
    assert_identical(streamed, ref)
    assert streamed.dice_at_05 == run_sweep(batches).dice_at_05


def test_tie_goes_to_highest_threshold() -> None:
    # Lesion pixels at 0.9, background at 0.1: every t in (0.1, 0.9] gives Dice 1.
    masks = torch.tensor([[[True, True], [False, False]]])
    probs = torch.tensor([[[0.9, 0.9], [0.1, 0.1]]])
    ref = find_best_threshold(probs, masks)
    streamed = run_sweep([(probs, masks)])
    assert_identical(streamed, ref)
    assert ref.best_dice == 1.0
    assert ref.optimal_threshold == THRESHOLDS[5]  # 0.9, the highest of the tied thresholds
    assert (ref.dice_per_threshold[5:45] == 1.0).all() and ref.dice_per_threshold[4] < 1.0


def test_fixed_threshold_skips_the_sweep() -> None:
    batches = make_batches(3)
    fixed = 0.37  # off the 0.02 grid
    metric = ThresholdSweep(fixed_threshold=fixed)
    assert metric.tp.shape == (2,)  # only the fixed threshold and 0.5 are counted
    for probs, masks in batches:
        metric.update(probs, masks)
    result = metric.compute()
    assert result.optimal_threshold == torch.tensor(fixed, dtype=torch.float32)
    assert result.thresholds.shape == result.dice_per_threshold.shape == (1,)
    assert_identical(result, reference(batches, thresholds=torch.tensor([fixed])))
    swept = run_sweep(batches)
    assert result.dice_at_05 == swept.dice_at_05
    assert result.dice_threshold_gain.item() == pytest.approx(
        (result.best_dice - result.dice_at_05).item(), abs=1e-7
    )
    assert result.best_dice <= swept.best_dice


def test_fixed_threshold_is_kept_even_when_worse() -> None:
    masks = torch.tensor([[[True, True], [False, False]]])
    probs = torch.tensor([[[0.9, 0.9], [0.1, 0.1]]])
    result = run_sweep([(probs, masks)], fixed_threshold=0.05)  # predicts everything
    assert result.optimal_threshold == torch.tensor(0.05)
    assert result.best_dice == pytest.approx(2 * 2 / (2 * 2 + 2))
    assert result.dice_at_05 == 1.0
    assert result.dice_threshold_gain == pytest.approx(2 / 3 - 1)


def test_per_image_means_by_hand() -> None:
    # Fixed at 0.5. Image A: tp=1, fp=1, fn=1 -> Dice 2/4, IoU 1/3.
    # Image B: empty mask, empty prediction -> Dice 1, IoU 1 (convention).
    # Image C: empty mask, one predicted pixel -> Dice 0, IoU 0.
    probs = torch.tensor(
        [
            [[0.9, 0.8], [0.1, 0.2]],
            [[0.1, 0.2], [0.3, 0.4]],
            [[0.6, 0.1], [0.1, 0.1]],
        ]
    )[:, None]
    masks = torch.tensor(
        [
            [[1, 0], [1, 0]],
            [[0, 0], [0, 0]],
            [[0, 0], [0, 0]],
        ],
        dtype=torch.float32,
    )[:, None]
    result = run_sweep([(probs[:2], masks[:2]), (probs[2:], masks[2:])], fixed_threshold=0.5)
    assert result.mean_dice_per_image.item() == pytest.approx((0.5 + 1 + 0) / 3)
    assert result.mean_iou_per_image.item() == pytest.approx((1 / 3 + 1 + 0) / 3)
    # Dataset aggregate: tp=1, fp=2, fn=1 -> 2/5.
    assert result.best_dice.item() == pytest.approx(0.4)
    assert_identical(result, find_best_threshold(probs, masks, torch.tensor([0.5])))


def test_all_empty_set_scores_one() -> None:
    probs = torch.zeros(2, 1, 3, 3)
    result = run_sweep([(probs, torch.zeros_like(probs))], fixed_threshold=0.5)
    assert result.best_dice == 1.0 and result.mean_dice_per_image == 1.0
    assert result.mean_iou_per_image == 1.0


def test_merge_state_equals_single_instance() -> None:
    batches = make_batches(11, num_batches=6)
    first, second = ThresholdSweep(), ThresholdSweep()
    for probs, masks in batches[:3]:
        first.update(probs, masks)
    for probs, masks in batches[3:]:
        second.update(probs, masks)
    # merge_state puts the incoming state first, so merging `first` into `second` keeps order.
    second.merge_state(first)
    assert_identical(second.compute(), run_sweep(batches))


@pytest.mark.filterwarnings("ignore:The ``compute`` method:UserWarning")
def test_summed_states_equal_single_instance() -> None:
    # What DDP sync does: sum the tp/fp/fn states and concatenate the per-image state.
    batches = make_batches(12, num_batches=6)
    halves = [ThresholdSweep(), ThresholdSweep()]
    for i, (probs, masks) in enumerate(batches):
        halves[i // 3].update(probs, masks)
    merged = ThresholdSweep()
    for name in ("tp", "fp", "fn"):
        setattr(merged, name, getattr(halves[0], name) + getattr(halves[1], name))
    merged.per_image = [torch.cat(halves[0].per_image + halves[1].per_image)]
    whole = run_sweep(batches)
    result = merged.compute()
    assert_identical(result, whole)


def test_reset_clears_state() -> None:
    batches = make_batches(5)
    metric = ThresholdSweep()
    metric.update(*make_batches(99, num_batches=1)[0])
    metric.compute()
    metric.reset()
    assert metric.tp.sum() == 0 and metric.per_image == []
    for probs, masks in batches:
        metric.update(probs, masks)
    assert_identical(metric.compute(), reference(batches))


def test_channel_and_plain_shapes_agree() -> None:
    probs, masks = make_batches(2, num_batches=1)[0]
    assert_identical(run_sweep([(probs, masks)]), run_sweep([(probs[:, 0], masks[:, 0])]))


def test_scalars_lists_scalar_fields() -> None:
    result = run_sweep(make_batches(1, num_batches=1))
    assert set(result.scalars()) == {
        "best_dice",
        "optimal_threshold",
        "dice_at_05",
        "dice_threshold_gain",
        "mean_dice_per_image",
        "mean_iou_per_image",
    }


@pytest.mark.parametrize(
    ("probs", "masks", "match"),
    [
        (torch.rand(2, 1, 4, 4), torch.zeros(2, 1, 4, 5), "matching shapes"),
        (torch.rand(2, 3, 4, 4), torch.zeros(2, 3, 4, 4), "matching shapes"),
        (torch.rand(4, 4), torch.zeros(4, 4), "matching shapes"),
        (torch.full((1, 2, 2), 1.5), torch.zeros(1, 2, 2), r"\[0, 1\]"),
        (torch.full((1, 2, 2), float("nan")), torch.zeros(1, 2, 2), r"\[0, 1\]"),
        (torch.ones(1, 2, 2, dtype=torch.long), torch.zeros(1, 2, 2), "floating point"),
    ],
)
def test_bad_inputs_raise(probs: torch.Tensor, masks: torch.Tensor, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        ThresholdSweep().update(probs, masks)
    with pytest.raises(ValueError, match=match):
        find_best_threshold(probs, masks)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"fixed_threshold": 1.5}, "fixed_threshold"),
        ({"fixed_threshold": float("nan")}, "fixed_threshold"),
        ({"fixed_threshold": 0.5, "thresholds": THRESHOLDS}, "not both"),
        ({"thresholds": torch.tensor([0.1, 0.5])}, "descending"),
        ({"thresholds": torch.tensor([0.5, 0.5])}, "descending"),
        ({"thresholds": torch.tensor([1.5, 0.5])}, r"\[0, 1\]"),
        ({"thresholds": torch.tensor([])}, "non-empty and 1-D"),
    ],
)
def test_bad_constructor_arguments_raise(kwargs: dict[str, object], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        ThresholdSweep(**kwargs)  # type: ignore[arg-type]


@pytest.mark.filterwarnings("ignore:The ``compute`` method:UserWarning")
def test_compute_before_update_raises() -> None:
    with pytest.raises(RuntimeError, match="before any update"):
        ThresholdSweep().compute()


def test_empty_reference_input_raises() -> None:
    with pytest.raises(ValueError, match="at least one image"):
        find_best_threshold(torch.zeros(0, 1, 4, 4), torch.zeros(0, 1, 4, 4))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_streaming_equals_cpu_reference() -> None:
    batches = make_batches(21, num_batches=6)
    metric = ThresholdSweep().cuda()
    for probs, masks in batches:
        metric.update(probs.cuda(), masks.cuda())
    result = metric.compute()
    ref = reference(batches)
    for f in fields(ThresholdResult):
        assert torch.equal(getattr(result, f.name).cpu(), getattr(ref, f.name)), f.name
