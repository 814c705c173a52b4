"""``TRANSFORM_CONFIG``: the albumentations augmentation pipeline declared in YAML.

Transform names and parameters are checked against albumentations whenever it is installed
(always with ``skinet[train]``, so ``skinet train`` and ``skinet config check`` catch a typo
before any work). They are not checked without albumentations, which the prediction-only
install lacks, nor when a checkpoint's config is read for inference
(``parse_config(..., check_transforms=False)``): prediction never builds the augmentations.
"""

from __future__ import annotations

import importlib.util
import inspect
import warnings
from typing import Any

from pydantic import Field, ValidationError, ValidationInfo, field_validator

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

    @field_validator("train_transforms")
    @classmethod
    def _check_against_albumentations(
        cls, specs: list[TransformSpec], info: ValidationInfo
    ) -> list[TransformSpec]:
        if not _should_check(info):
            return specs
        errors = [e for i, spec in enumerate(specs) if (e := check_transform_spec(i, spec))]
        if errors:
            raise ValueError("; ".join(errors))
        return specs

    @field_validator("compose_kwargs")
    @classmethod
    def _check_compose_kwargs(cls, kwargs: dict[str, Any], info: ValidationInfo) -> dict[str, Any]:
        if not _should_check(info):
            return kwargs
        import albumentations as A

        allowed = set(inspect.signature(A.Compose.__init__).parameters) - {"self", "transforms"}
        unknown = sorted(set(kwargs) - allowed)
        if unknown:
            raise ValueError(
                f"unknown albumentations.Compose argument(s) {unknown}; allowed: {sorted(allowed)}"
            )
        return kwargs


CHECK_TRANSFORMS = "check_transforms"
"""Validation-context key: ``False`` skips the albumentations checks (see the module docstring)."""


def transforms_checkable() -> bool:
    """Whether albumentations is installed, so ``TRANSFORM_CONFIG`` can be checked."""
    try:
        return importlib.util.find_spec("albumentations") is not None
    except ImportError:  # an import hook that refuses the name
        return False


def _should_check(info: ValidationInfo) -> bool:
    context = info.context or {}
    return bool(context.get(CHECK_TRANSFORMS, True)) and transforms_checkable()


def check_transform_spec(index: int, spec: TransformSpec) -> str | None:
    """Build ``spec``; a message naming ``train_transforms[index]`` if it fails.

    Names are SkiNet's own transforms (``skinet.data.augment.CUSTOM_TRANSFORMS``) or
    albumentations'. Albumentations only *warns* about unknown keyword arguments, so those
    warnings are turned into errors here: a misspelt parameter would otherwise be silently ignored.
    """
    from skinet.data.augment import CUSTOM_TRANSFORMS, resolve_transform_class

    where = f"TRANSFORM_CONFIG.train_transforms[{index}] ({spec.name})"
    transform_cls = resolve_transform_class(spec.name)
    if transform_cls is None:
        return (
            f"{where}: unknown albumentations transform {spec.name!r} (nor one of SkiNet's "
            f"{sorted(CUSTOM_TRANSFORMS)})"
        )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            transform_cls(**spec.params)
        except (TypeError, ValueError) as exc:
            # albumentations checks params with pydantic schemas and re-raises as ValueError
            cause = next(
                (
                    e
                    for e in (exc, exc.__cause__, exc.__context__)
                    if isinstance(e, ValidationError)
                ),
                None,
            )
            if cause is None:
                return f"{where}: invalid parameters {spec.params}: {' '.join(str(exc).split())}"
            bad = {str(e["loc"][0]): e["msg"] for e in cause.errors() if e["loc"]}
            detail = "; ".join(f"{k}={spec.params.get(k)!r}: {msg}" for k, msg in bad.items())
            return f"{where}: invalid parameter {detail}"
    for warning in caught:
        text = str(warning.message)
        if "are not valid for transform" in text:
            return f"{where}: {text.split(' for transform')[0].lower()} (unknown parameter)"
    return None
