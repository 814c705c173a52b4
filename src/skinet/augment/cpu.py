"""SkiNet's own augmentations, for what albumentations lacks, and the transform-name lookup.

Albumentations has no field-of-view vignette: full-frame dermoscopy images (uncropped, from
another dermatoscope) show the skin through a circular lens, black outside it. Training with
:class:`CircularVignette` teaches the model that the dark border is not lesion.

``TRANSFORM_CONFIG.train_transforms[i].name`` is looked up in :data:`CUSTOM_TRANSFORMS` first,
then in albumentations (:func:`resolve_transform_class`); no import paths in YAML.
"""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING, Any

import albumentations as A
import numpy as np
from albumentations.core.transforms_interface import BaseTransformInitSchema
from pydantic import Field, field_validator

from skinet.imaging.vignette import apply_circular_vignette

if TYPE_CHECKING:
    from skinet.config.experiment import ExperimentConfig
    from skinet.config.transform import TransformConfig


class CircularVignette(A.ImageOnlyTransform):
    """A dark circular field-of-view border, as dermatoscopes without cropping show.

    Each call draws a radius in ``radius_range`` (fractions of half the shorter side), a centre
    within ``center_jitter`` (fraction of width/height) of the middle and a fill value in
    ``fill_range``, from albumentations' own seeded generator (``Compose(seed=...)``). Masks are
    left unchanged: the lesion under the border is still lesion.

    Shapes:
        uint8 ``(H, W, C)`` -> uint8 ``(H, W, C)``.
    """

    class InitSchema(BaseTransformInitSchema):
        radius_range: tuple[float, float]
        center_jitter: float = Field(ge=0.0, le=0.5)
        fill_range: tuple[int, int]

        @field_validator("radius_range")
        @classmethod
        def _check_radius(cls, value: tuple[float, float]) -> tuple[float, float]:
            if not 0 < value[0] <= value[1]:
                raise ValueError(f"need 0 < low <= high, got {value}")
            return value

        @field_validator("fill_range")
        @classmethod
        def _check_fill(cls, value: tuple[int, int]) -> tuple[int, int]:
            if not 0 <= value[0] <= value[1] <= 255:
                raise ValueError(f"need 0 <= low <= high <= 255, got {value}")
            return value

    def __init__(
        self,
        radius_range: tuple[float, float] = (0.9, 1.3),
        center_jitter: float = 0.05,
        fill_range: tuple[int, int] = (0, 20),
        p: float = 0.3,
    ) -> None:
        super().__init__(p=p)
        self.radius_range = radius_range
        self.center_jitter = center_jitter
        self.fill_range = fill_range

    def get_params(self) -> dict[str, Any]:
        """A random centre, radius and fill value (named ``fill_value``: albumentations
        overwrites a ``fill`` parameter with a transform's ``fill`` attribute)."""
        jitter = self.center_jitter
        center = (
            0.5 + self.py_random.uniform(-jitter, jitter),
            0.5 + self.py_random.uniform(-jitter, jitter),
        )
        return {
            "center": center,
            "radius": self.py_random.uniform(*self.radius_range),
            "fill_value": self.py_random.randint(*self.fill_range),
        }

    def apply(
        self,
        img: np.ndarray,
        center: tuple[float, float],
        radius: float,
        fill_value: int,
        **params: Any,
    ) -> np.ndarray:
        """The image with :func:`apply_circular_vignette` applied."""
        return apply_circular_vignette(img, center, radius, fill_value)

    def get_transform_init_args_names(self) -> tuple[str, ...]:
        """Arguments shown by ``repr`` and kept by albumentations' serialisation."""
        return ("radius_range", "center_jitter", "fill_range")


CUSTOM_TRANSFORMS: dict[str, type[A.BasicTransform]] = {"CircularVignette": CircularVignette}
"""SkiNet transforms usable by name in ``TRANSFORM_CONFIG.train_transforms``."""


def resolve_transform_class(name: str) -> type[A.BasicTransform] | None:
    """The transform class called ``name``: SkiNet's own first, then albumentations'."""
    if name in CUSTOM_TRANSFORMS:
        return CUSTOM_TRANSFORMS[name]
    transform_cls = getattr(A, name, None)
    if inspect.isclass(transform_cls) and issubclass(transform_cls, A.BasicTransform):
        return transform_cls
    return None


def resolve_transform_seed(transform_cfg: TransformConfig, fallback_seed: int) -> int:
    """``seed_value``, else ``compose_kwargs["seed"]``, else ``TRAIN_CONFIG.seed``."""
    if transform_cfg.seed_value is not None:
        return transform_cfg.seed_value
    if transform_cfg.compose_kwargs.get("seed") is not None:
        return int(transform_cfg.compose_kwargs["seed"])
    return fallback_seed


def build_train_transform(cfg: ExperimentConfig) -> A.Compose:
    """The seeded training augmentation pipeline of ``cfg.transform``.

    The transforms were already checked when the config was loaded; names are albumentations'
    or SkiNet's own (:data:`skinet.augment.cpu.CUSTOM_TRANSFORMS`).
    """
    # Imported here: prediction normalises with this module and needs no albumentations.
    import albumentations as A

    from skinet.augment.cpu import resolve_transform_class

    transform_cfg = cfg.transform
    transforms = [
        resolve_transform_class(spec.name)(**spec.params)  # type: ignore[misc]
        for spec in transform_cfg.train_transforms
    ]
    kwargs: dict[str, Any] = dict(transform_cfg.compose_kwargs)
    kwargs["seed"] = resolve_transform_seed(transform_cfg, cfg.train.seed)
    return A.Compose(transforms, **kwargs)
