"""build_dataloaders, the RAM cache, RepeatDataLoader and augmentation seeding."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import pytest
import torch

from skinet.config.experiment import parse_config
from skinet.training.data.dataset import SegmentationDataset
from skinet.training.data.loaders import build_dataloaders
from skinet.training.data.samplers import RepeatDataLoader
from skinet.training.data.visualize import visualize_augmented_data


def _config(raw: dict[str, Any], **data: Any):
    raw = {**raw, "DATA_CONFIG": {**raw["DATA_CONFIG"], **data}}
    return parse_config(raw)


def _with_train(raw: dict[str, Any], **train: Any) -> dict[str, Any]:
    return {**raw, "TRAIN_CONFIG": {**raw["TRAIN_CONFIG"], **train}}


def test_batches_shapes_dtypes_and_values(tiny_config) -> None:
    loaders = build_dataloaders(tiny_config)
    assert (len(loaders.train_dataset), len(loaders.val_dataset)) == (8, 4)
    assert loaders.test is not None and len(loaders.test_dataset) == 4
    for loader in (loaders.train, loaders.val, loaders.test):
        images, masks = next(iter(loader))
        assert images.dtype == torch.float32 and images.shape == (4, 3, 32, 32)
        assert masks.dtype == torch.float32 and masks.shape == (4, 1, 32, 32)
        assert set(masks.unique().tolist()) <= {0.0, 1.0} and masks.sum() > 0
        assert torch.isfinite(images).all() and images.abs().max() < 10


def test_val_and_test_not_shuffled_nor_augmented(tiny_config) -> None:
    loaders = build_dataloaders(tiny_config)
    assert loaders.val_dataset.transform is None and loaders.test_dataset.transform is None
    first = torch.cat([b[0] for b in loaders.val])
    second = torch.cat([b[0] for b in loaders.val])
    assert torch.equal(first, second)
    assert torch.equal(first[0], loaders.val_dataset[0][0])


def test_cache_and_disk_give_identical_samples(tiny_raw) -> None:
    cached = build_dataloaders(parse_config(_with_train(tiny_raw, cache_in_ram=True)))
    disk = build_dataloaders(parse_config(_with_train(tiny_raw, cache_in_ram=False)))
    ds = cached.val_dataset
    assert ds.cached and not disk.val_dataset.cached
    assert ds.images is not None and ds.masks is not None
    assert ds.images.shape == (4, 32, 32, 3) and ds.images.flags.c_contiguous
    assert ds.masks.dtype == np.uint8 and ds.masks.shape == (4, 32, 32)
    for i in range(len(ds)):
        for a, b in zip(ds[i], disk.val_dataset[i], strict=True):
            assert torch.equal(a, b)


def test_disk_reads_decode_at_reduced_scale_as_the_cache_does(tiny_raw) -> None:
    def val_pixels(cache_in_ram: bool, reduced: bool) -> list[np.ndarray]:
        raw = _with_train(tiny_raw, cache_in_ram=cache_in_ram)
        raw["DATA_CONFIG"] = {**raw["DATA_CONFIG"], "reduced_jpeg_decode": reduced}
        dataset = build_dataloaders(parse_config(raw)).val_dataset
        return [dataset.load_raw(i)[0] for i in range(len(dataset))]

    disk = val_pixels(cache_in_ram=False, reduced=True)
    assert all(np.array_equal(a, b) for a, b in zip(disk, val_pixels(True, True), strict=True))
    # The synthetic JPEGs are large enough for a reduced decode to change pixels.
    full = val_pixels(cache_in_ram=False, reduced=False)
    assert any(not np.array_equal(a, b) for a, b in zip(disk, full, strict=True))


def test_image_per_channel_normalisation(tiny_raw) -> None:
    loaders = build_dataloaders(_config(tiny_raw, normalization_mode="image_per_channel"))
    image, _ = loaders.val_dataset[0]
    assert torch.allclose(image.mean(dim=(1, 2)), torch.zeros(3), atol=1e-4)
    assert torch.allclose(image.std(dim=(1, 2), correction=0), torch.ones(3), atol=1e-3)


def test_max_samples_per_split(tiny_raw) -> None:
    loaders = build_dataloaders(_config(tiny_raw, max_samples_per_split=2))
    assert len(loaders.train_dataset) == len(loaders.val_dataset) == 2


def _epoch(loader) -> torch.Tensor:
    return torch.cat([images for images, _ in loader])


def test_augmentation_reproducible_for_a_seed(tiny_raw) -> None:
    def run(seed: int) -> torch.Tensor:
        torch.manual_seed(seed)
        return _epoch(build_dataloaders(parse_config(_with_train(tiny_raw, seed=seed))).train)

    assert torch.equal(run(1), run(1))
    assert not torch.equal(run(1), run(2))


@pytest.mark.process
def test_workers_get_distinct_reproducible_streams(tiny_raw) -> None:
    raw = _with_train(tiny_raw, num_workers=2, batch_size=1)
    raw["DATA_CONFIG"]["synthetic_num_train"] = 8

    def run() -> list[torch.Tensor]:
        torch.manual_seed(0)
        loaders = build_dataloaders(parse_config(raw))
        # the same sample through both workers: with a shared stream both copies would match
        dataset = loaders.train_dataset
        dataset.samples = [dataset.samples[0]] * 8
        assert dataset.images is not None and dataset.masks is not None
        dataset.images = np.ascontiguousarray(np.repeat(dataset.images[:1], 8, axis=0))
        dataset.masks = np.ascontiguousarray(np.repeat(dataset.masks[:1], 8, axis=0))
        loader = RepeatDataLoader(dataset, batch_size=1, shuffle=False, num_workers=2)
        return [images[0] for images, _ in loader]

    first = run()
    worker0, worker1 = first[0::2], first[1::2]
    assert any(not torch.equal(a, b) for a, b in zip(worker0, worker1, strict=True))
    assert all(torch.equal(a, b) for a, b in zip(first, run(), strict=True))


def test_repeat_dataloader_arguments(tiny_config) -> None:
    dataset = build_dataloaders(tiny_config).val_dataset
    serial = RepeatDataLoader(dataset, batch_size=2, num_workers=0, prefetch_factor=4)
    assert serial.prefetch_factor is None and not serial.persistent_workers
    parallel = RepeatDataLoader(
        dataset, batch_size=2, num_workers=1, prefetch_factor=4, pin_memory=False
    )
    assert parallel.persistent_workers and parallel.prefetch_factor == 4
    loaders = build_dataloaders(tiny_config)
    assert loaders.train.pin_memory is False and loaders.train.drop_last


def test_lightning_can_inject_a_distributed_sampler(tiny_config) -> None:
    pytest.importorskip("lightning")
    from lightning.pytorch.utilities.data import _update_dataloader
    from torch.utils.data import DistributedSampler

    loaders = build_dataloaders(tiny_config)
    sampler = DistributedSampler(loaders.train_dataset, num_replicas=2, rank=1, shuffle=True)
    rebuilt = _update_dataloader(loaders.train, sampler)
    assert type(rebuilt) is RepeatDataLoader
    assert rebuilt.sampler is sampler and rebuilt.batch_size == loaders.train.batch_size
    assert rebuilt.dataset is loaders.train_dataset
    assert len(list(rebuilt)) == 1  # 4 samples on this rank, batch 4


def _draws() -> tuple[float, float, float]:
    return random.random(), float(np.random.rand()), float(torch.rand(1))


def test_visualize_leaves_every_rng_untouched(tiny_config, tmp_path) -> None:
    dataset: SegmentationDataset = build_dataloaders(tiny_config).train_dataset

    def after(visualise: bool) -> tuple[tuple[float, float, float], torch.Tensor]:
        random.seed(3)
        np.random.seed(3)
        torch.manual_seed(3)
        dataset.transform.set_random_seed(11)
        if visualise:
            out = visualize_augmented_data(dataset, tmp_path / "grid.png", num_samples=6, ncols=3)
            assert out.is_file()
        return _draws(), dataset[0][0]

    without, with_ = after(False), after(True)
    assert without[0] == with_[0]
    assert torch.equal(without[1], with_[1])


class _GlobalRngTransform:
    """A transform drawing from every global RNG, as user transforms may."""

    def __call__(self, image, mask):
        shift = random.randint(0, 3) + int(np.random.randint(0, 3)) + int(torch.randint(0, 3, ()))
        return {"image": np.roll(image, shift, axis=1), "mask": np.roll(mask, shift, axis=1)}


def test_visualize_restores_global_rngs(tiny_config, tmp_path) -> None:
    dataset = build_dataloaders(tiny_config).train_dataset
    dataset.transform = _GlobalRngTransform()

    def after(visualise: bool) -> tuple[float, float, float]:
        random.seed(5)
        np.random.seed(5)
        torch.manual_seed(5)
        if visualise:
            visualize_augmented_data(dataset, tmp_path / "grid.png", num_samples=4)
        return _draws()

    assert after(True) == after(False)


def test_visualize_grid_shape(tiny_config, tmp_path) -> None:
    import cv2

    dataset = build_dataloaders(tiny_config).train_dataset
    out = visualize_augmented_data(
        dataset, tmp_path / "v" / "grid.png", num_samples=5, ncols=2, tile_size=48
    )
    grid = cv2.imread(str(out))
    assert grid.shape == (3 * 48, 2 * 48, 3)
    green = (grid[..., 1] == 255) & (grid[..., 0] == 0) & (grid[..., 2] == 0)
    assert green.any()
