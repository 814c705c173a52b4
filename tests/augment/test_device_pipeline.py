"""The device pipeline from ``TRANSFORM_CONFIG``: seeding, probabilities, ranges, config checks."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import albumentations as A
import numpy as np
import pytest
import torch
import yaml

from skinet.augment.checks import check_config
from skinet.augment.cpu import build_train_transform
from skinet.augment.device_pipeline import build_device_augmentation
from skinet.augment.device_transforms import DEVICE_TRANSFORMS
from skinet.config.errors import ConfigError
from skinet.config.experiment import parse_config
from skinet.imaging.normalize import build_normalizer
from skinet.training.data.device_split import DeviceResidentSplit

REPO = Path(__file__).resolve().parents[2]


def _recipe(name: str) -> dict[str, Any]:
    return yaml.safe_load((REPO / "configs" / name).read_text())["TRANSFORM_CONFIG"]


def _split(raw: dict[str, Any], count: int = 16, size: int = 32) -> DeviceResidentSplit:
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, (count, size, size, 3), dtype=np.uint8)
    masks = (rng.random((count, size, size)) > 0.5).astype(np.uint8)
    return DeviceResidentSplit(images, masks, build_device_augmentation(parse_config(raw)))


def _device_raw(tiny_raw: dict[str, Any], recipe: str = "transforms_robust.yaml") -> dict:
    tiny_raw["TRAIN_CONFIG"]["augment_on"] = "device"
    tiny_raw["TRANSFORM_CONFIG"] = _recipe(recipe)
    return tiny_raw


def test_same_seed_epoch_and_rank_give_identical_batches(tiny_raw: dict[str, Any]) -> None:
    split = _split(_device_raw(tiny_raw)).to("cpu")
    indices = torch.tensor([3, 1, 4, 1, 5, 9, 2, 6])
    first = split.make_batch(indices, epoch=0)
    second_batch = split.make_batch(indices, epoch=0)  # the stream goes on within an epoch
    again = _split(tiny_raw).to("cpu").make_batch(indices, epoch=0)
    for a, b in zip(first, again, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    assert not torch.equal(first[0], second_batch[0])
    assert not torch.equal(first[0], split.make_batch(indices, epoch=1)[0])
    assert not torch.equal(first[0], split.make_batch(indices, epoch=0, rank=1)[0])
    tiny_raw["TRANSFORM_CONFIG"]["seed_value"] = 7
    assert not torch.equal(first[0], _split(tiny_raw).to("cpu").make_batch(indices, epoch=0)[0])


def test_restarting_an_epoch_repeats_its_stream(tiny_raw: dict[str, Any]) -> None:
    split = _split(_device_raw(tiny_raw)).to("cpu")
    indices = torch.arange(8)
    epoch0 = split.make_batch(indices, epoch=0)[0]
    split.make_batch(indices, epoch=1)
    torch.testing.assert_close(split.make_batch(indices, epoch=0)[0], epoch0, rtol=0, atol=0)


def test_robust_recipe_batches_are_normalised_and_masks_binary(tiny_raw: dict[str, Any]) -> None:
    split = _split(_device_raw(tiny_raw)).to("cpu")
    images, masks = split.make_batch(torch.arange(16), epoch=0)
    assert images.shape == (16, 3, 32, 32) and images.dtype == torch.float32
    assert masks.shape == (16, 1, 32, 32) and set(masks.unique().tolist()) <= {0.0, 1.0}
    assert torch.isfinite(images).all()


def test_each_op_is_applied_with_its_probability(tiny_raw: dict[str, Any]) -> None:
    op = DEVICE_TRANSFORMS["HorizontalFlip"](A.HorizontalFlip(p=0.3))
    ramp = torch.arange(8.0).repeat(400, 3, 8, 1)  # (400, 3, 8, 8), increasing along x
    images, _ = op(ramp, torch.zeros(400, 1, 8, 8), torch.Generator().manual_seed(0))
    flipped = (images[:, 0, 0, 0] == 7).float().mean().item()
    assert 0.23 < flipped < 0.37  # 400 draws: 3.5 standard deviations


def test_parameters_follow_albumentations_ranges() -> None:
    generator = torch.Generator().manual_seed(0)
    jitter = DEVICE_TRANSFORMS["ColorJitter"](A.ColorJitter(brightness=0.15, hue=0.02))
    params = jitter.draw(4000, generator, torch.device("cpu"))
    assert 0.85 <= params["brightness"].min() < 0.86 and 1.14 < params["brightness"].max() <= 1.15
    assert -0.02 <= params["hue"].min() < -0.019 and 0.019 < params["hue"].max() <= 0.02
    orders = {tuple(o) for o in params["order"].tolist()}
    assert len(orders) == 24  # every order of the four steps, as albumentations shuffles them
    affine = DEVICE_TRANSFORMS["Affine"](
        A.Affine(scale=(0.75, 1.25), translate_percent=(-0.08, 0.08), rotate=(-30, 30))
    )
    params = affine.draw(4000, generator, torch.device("cpu"))
    assert params["scale"].min() >= 0.75 and params["scale"].max() <= 1.25
    assert not torch.equal(params["scale"][:, 0], params["scale"][:, 1])  # x and y independent
    assert -30 <= params["rotate"].min() < -29.9 and 29.9 < params["rotate"].max() <= 30
    blur = DEVICE_TRANSFORMS["GaussianBlur"](A.GaussianBlur(blur_limit=(3, 5)))
    assert set(blur.draw(500, generator, torch.device("cpu"))["size"].tolist()) == {3, 4, 5}


def test_pixel_statistics_match_the_cpu_pipeline(tiny_raw: dict[str, Any]) -> None:
    """The robust recipe's mean and spread per channel over many draws, device vs albumentations."""
    raw = _device_raw(tiny_raw)
    for spec in raw["TRANSFORM_CONFIG"]["train_transforms"]:
        if spec["name"] not in ("Affine", "CircularVignette"):  # colour ops at a higher rate
            spec["params"]["p"] = 0.8
    cfg = parse_config(raw)
    rng = np.random.default_rng(1)
    image = np.clip(rng.normal(150, 30, (32, 32, 3)) + [10, -20, -40], 0, 255).astype(np.uint8)
    mask = np.zeros((32, 32), np.uint8)
    count = 600
    split = DeviceResidentSplit(
        np.repeat(image[None], count, 0),
        np.repeat(mask[None], count, 0),
        build_device_augmentation(cfg),
    ).to("cpu")
    device_images = split.make_batch(torch.arange(count), epoch=0)[0].numpy()
    transform, normalizer = build_train_transform(cfg), build_normalizer(cfg)
    cpu_images = np.stack(
        [normalizer(transform(image=image, mask=mask)["image"]) for _ in range(count)]
    )
    for reduce in (np.mean, np.std):
        device_stat = reduce(device_images, axis=(0, 2, 3))
        cpu_stat = reduce(cpu_images, axis=(0, 2, 3))
        # Sampling noise of 600 draws is ~0.03 here; a wrong range or unit is several times that.
        np.testing.assert_allclose(device_stat, cpu_stat, atol=0.08)


@pytest.mark.parametrize("recipe", [None, "transforms_dermoscopy.yaml", "transforms_robust.yaml"])
def test_every_shipped_recipe_has_a_device_version(tiny_raw: dict[str, Any], recipe) -> None:
    tiny_raw["TRAIN_CONFIG"]["augment_on"] = "device"
    if recipe is not None:
        tiny_raw["TRANSFORM_CONFIG"] = _recipe(recipe)
    cfg = parse_config(tiny_raw)
    assert len(build_device_augmentation(cfg).ops) == len(cfg.transform.train_transforms)


def test_a_transform_without_device_version_is_refused_by_name(tiny_raw: dict[str, Any]) -> None:
    tiny_raw["TRAIN_CONFIG"]["augment_on"] = "device"
    tiny_raw["TRANSFORM_CONFIG"] = {
        "train_transforms": [
            {"name": "HorizontalFlip", "params": {"p": 0.5}},
            {"name": "ElasticTransform", "params": {"p": 0.5}},
            {"name": "Affine", "params": {"fit_output": True}},
        ]
    }
    with pytest.raises(ConfigError) as caught:
        check_config(parse_config(tiny_raw))
    message = str(caught.value)
    assert (
        "TRANSFORM_CONFIG.train_transforms[1] (ElasticTransform) has no device version" in message
    )
    assert "TRANSFORM_CONFIG.train_transforms[2] (Affine): fit_output=True" in message
    assert "TRAIN_CONFIG.augment_on" in message and "[0]" not in message
    tiny_raw["TRAIN_CONFIG"]["augment_on"] = "cpu"
    parse_config(tiny_raw)  # the CPU pipeline has them all


def test_device_augmentation_caches_the_training_split_anyway(tiny_config) -> None:
    from skinet.training.data.loaders import build_dataset

    cfg = tiny_config.model_copy(deep=True)
    cfg.train.cache_in_ram = False
    cfg.train.augment_on = "device"
    assert build_dataset(cfg, "train").cached
    assert not build_dataset(cfg, "val").cached


def test_make_batch_before_to_is_a_clear_error(tiny_raw: dict[str, Any]) -> None:
    split = _split(_device_raw(tiny_raw))
    with pytest.raises(RuntimeError, match=r"before \.to\(device\)"):
        split.make_batch(torch.arange(2), epoch=0)
