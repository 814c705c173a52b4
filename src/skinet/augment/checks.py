"""Checks of a config's ``TRANSFORM_CONFIG`` against what training will build from it.

A config validates without these (``skinet.config`` imports nothing of the augmentations), so
a checkpoint's config reads on the core install. Every command that trains runs
:func:`check_config` on the config it loads, before any work: a misspelt transform or
parameter is then an error naming ``TRANSFORM_CONFIG.train_transforms[i]``, not a crash or a
silently ignored argument. Without albumentations (the prediction-only install) the
transforms cannot be built and only the checks that need none run.
"""

from __future__ import annotations

import importlib.util
import inspect
import warnings

from pydantic import ValidationError

from skinet.config.errors import ConfigError
from skinet.config.experiment import ExperimentConfig
from skinet.config.transform import TransformSpec


def check_config(cfg: ExperimentConfig, source: str = "<config>") -> ExperimentConfig:
    """``cfg``, once its augmentations can be built as written.

    Raises:
        ConfigError: naming ``source`` and every problem at once.
    """
    errors = transform_problems(cfg)
    if errors:
        lines = "\n".join(f"  {error}" for error in errors)
        raise ConfigError(f"invalid config {source}:\n{lines}")
    return cfg


def transform_problems(cfg: ExperimentConfig) -> list[str]:
    """A message per problem of ``TRANSFORM_CONFIG`` for ``TRAIN_CONFIG.augment_on``."""
    transform = cfg.transform
    if cfg.train.augment_on == "device" and transform.compose_kwargs:
        return [
            f"TRANSFORM_CONFIG.compose_kwargs {transform.compose_kwargs} is not applied "
            "with TRAIN_CONFIG.augment_on: device (the device pipeline builds no "
            "albumentations Compose): remove it, or augment on the CPU (augment_on: cpu)"
        ]
    if not transforms_checkable():
        return []
    if cfg.train.augment_on == "device":
        from skinet.augment.device_pipeline import check_device_transforms

        return check_device_transforms(transform.train_transforms)
    specs = transform.train_transforms
    errors = [e for i, spec in enumerate(specs) if (e := check_transform_spec(i, spec))]
    return errors + compose_kwargs_problems(transform.compose_kwargs)


def compose_kwargs_problems(kwargs: dict) -> list[str]:
    """``TRANSFORM_CONFIG.compose_kwargs`` that ``albumentations.Compose`` does not take."""
    import albumentations as A

    allowed = set(inspect.signature(A.Compose.__init__).parameters) - {"self", "transforms"}
    unknown = sorted(set(kwargs) - allowed)
    if not unknown:
        return []
    return [
        f"TRANSFORM_CONFIG.compose_kwargs: unknown albumentations.Compose argument(s) {unknown}; "
        f"allowed: {sorted(allowed)}"
    ]


def transforms_checkable() -> bool:
    """Whether albumentations is installed, so ``TRANSFORM_CONFIG`` can be checked."""
    try:
        return importlib.util.find_spec("albumentations") is not None
    except ImportError:  # an import hook that refuses the name
        return False


def check_transform_spec(index: int, spec: TransformSpec) -> str | None:
    """Build ``spec``; a message naming ``train_transforms[index]`` if it fails.

    Names are SkiNet's own transforms (``skinet.augment.cpu.CUSTOM_TRANSFORMS``) or
    albumentations'. Albumentations only *warns* about unknown keyword arguments, so those
    warnings are turned into errors here: a misspelt parameter would otherwise be silently ignored.
    """
    from skinet.augment.cpu import CUSTOM_TRANSFORMS, resolve_transform_class

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
