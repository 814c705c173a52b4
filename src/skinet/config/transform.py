"""``TRANSFORM_CONFIG``: the albumentations augmentation pipeline declared in YAML.

Only the shape is validated here. The names and parameters are checked against albumentations
(and the device pipeline) by :func:`skinet.augment.checks.check_config`, which ``skinet train``,
``sweep``, ``seeds``, ``cv`` and ``config check`` run on every config they load, before any
work; a checkpoint's config read for prediction is not checked: prediction builds no
augmentation.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from skinet.config.base import Section


class TransformSpec(Section):
    """One albumentations transform: its class name and keyword arguments."""

    name: str
    """An albumentations class name (e.g. ``HorizontalFlip``) or SkiNet's ``CircularVignette``."""
    params: dict[str, Any] = Field(default_factory=dict)
    """Keyword arguments passed to the transform's constructor."""


def _default_train_transforms() -> list[TransformSpec]:
    return [
        TransformSpec(name="HorizontalFlip", params={"p": 0.5}),
        TransformSpec(name="VerticalFlip", params={"p": 0.5}),
        TransformSpec(name="RandomRotate90", params={"p": 0.5}),
        TransformSpec(
            name="Affine",
            params={
                "scale": [0.9, 1.1],
                "rotate": [-20, 20],
                "translate_percent": [-0.05, 0.05],
                "p": 0.5,
            },
        ),
        TransformSpec(
            name="ColorJitter",
            params={"brightness": 0.15, "contrast": 0.15, "saturation": 0.1, "hue": 0.02, "p": 0.5},
        ),
    ]


class TransformConfig(Section):
    """Training augmentations; validation and test data are only resized and normalised."""

    seed_value: int | None = None
    """Seed of the augmentation pipeline; ``None`` falls back to ``TRAIN_CONFIG.seed``."""
    compose_kwargs: dict[str, Any] = Field(default_factory=dict)
    """Extra keyword arguments for ``albumentations.Compose`` (e.g. ``seed``)."""
    train_transforms: list[TransformSpec] = Field(default_factory=_default_train_transforms)
    """Transforms applied to training samples, in order."""
