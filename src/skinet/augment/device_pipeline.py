"""``TRANSFORM_CONFIG.train_transforms`` as batched tensor ops (``augment_on: device``).

Each entry is built with albumentations first (so names, defaults and range parsing are
albumentations' own: ``brightness: 0.15`` becomes ``(0.85, 1.15)`` exactly as on the CPU), then
mapped to a :class:`DeviceOp` that draws one parameter set per sample from a seeded
``torch.Generator`` and applies the op of :mod:`skinet.augment.device_ops` to the samples chosen
with probability ``p``. Transforms or parameter values without a device version are refused by
name when the config is loaded (:func:`check_device_transforms`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from skinet.augment import device_ops as ops
from skinet.augment.cpu import resolve_transform_class, resolve_transform_seed
from skinet.augment.device_transforms import DEVICE_TRANSFORMS, DeviceOp
from skinet.runtime.seeds import derive_seed

if TYPE_CHECKING:
    from skinet.config.experiment import ExperimentConfig
    from skinet.config.transform import TransformSpec


def check_device_transforms(specs: Sequence[TransformSpec]) -> list[str]:
    """A message per entry of ``train_transforms`` that has no device version (empty: all do)."""
    errors = []
    for index, spec in enumerate(specs):
        where = f"TRANSFORM_CONFIG.train_transforms[{index}] ({spec.name})"
        op_cls = DEVICE_TRANSFORMS.get(spec.name)
        if op_cls is None:
            errors.append(
                f"{where} has no device version, needed by TRAIN_CONFIG.augment_on: device "
                f"(available: {sorted(DEVICE_TRANSFORMS)}); set TRAIN_CONFIG.augment_on: cpu "
                "or remove the transform"
            )
            continue
        transform_cls = resolve_transform_class(spec.name)
        reason = op_cls.refuse(transform_cls(**spec.params)) if transform_cls else None
        if reason:
            errors.append(
                f"{where}: {reason}, needed by TRAIN_CONFIG.augment_on: device; change it or "
                "set TRAIN_CONFIG.augment_on: cpu"
            )
    return errors


class DeviceAugmentation:
    """The training pipeline on tensors: uint8 batch in, normalised float batch out.

    Shapes:
        images uint8 ``(B, H, W, 3)`` and masks uint8 ``(B, H, W)`` in {0, 1} ->
        images float32 ``(B, 3, H, W)`` normalised and masks float32 ``(B, 1, H, W)`` in {0, 1}.
    """

    def __init__(
        self,
        ops_: Sequence[DeviceOp],
        seed: int,
        normalization_mode: str,
        mean: Sequence[float],
        std: Sequence[float],
    ) -> None:
        self.ops = list(ops_)
        self.seed = seed
        self.normalization_mode = normalization_mode
        self.mean, self.std = tuple(mean), tuple(std)

    def make_generator(self, device: torch.device | str, epoch: int, rank: int) -> torch.Generator:
        """A generator on ``device`` seeded from the transform seed, the epoch and the rank."""
        seed = derive_seed(self.seed, epoch, rank)
        return torch.Generator(device=device).manual_seed(seed)

    def __call__(
        self, images: Tensor, masks: Tensor, generator: torch.Generator
    ) -> tuple[Tensor, Tensor]:
        pixels = images.permute(0, 3, 1, 2).float()
        mask_batch = masks[:, None].float()
        for op in self.ops:
            pixels, mask_batch = op(pixels, mask_batch, generator)
        mean = torch.tensor(self.mean, device=pixels.device)
        std = torch.tensor(self.std, device=pixels.device)
        normalized = ops.normalize(pixels, self.normalization_mode, mean, std)
        return normalized.contiguous(), (mask_batch > 0.5).float()


def build_device_augmentation(cfg: ExperimentConfig) -> DeviceAugmentation:
    """The :class:`DeviceAugmentation` of ``TRANSFORM_CONFIG`` and ``DATA_CONFIG``'s normalisation.

    Raises:
        ValueError: a transform without a device version (the config check names it first).
    """
    errors = check_device_transforms(cfg.transform.train_transforms)
    if errors:
        raise ValueError("; ".join(errors))
    device_ops = [
        DEVICE_TRANSFORMS[spec.name](resolve_transform_class(spec.name)(**spec.params))  # type: ignore[misc]
        for spec in cfg.transform.train_transforms
    ]
    data = cfg.data
    return DeviceAugmentation(
        device_ops,
        resolve_transform_seed(cfg.transform, cfg.train.seed),
        data.normalization_mode,
        data.mean,
        data.std,
    )
