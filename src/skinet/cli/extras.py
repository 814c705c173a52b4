"""Optional dependency groups (pip extras) and the message when a subcommand lacks one.

``pip install skinet`` is enough for ``skinet predict``, ``evaluate``, ``robustness`` and
``export``; training, sweeps and tracking need ``skinet[train]``, ONNX export ``skinet[onnx]``.
A handler that needs an extra says so with :func:`requires`; ``skinet.cli.main.main`` checks before
it runs (nothing is written), and turns a ``ModuleNotFoundError`` of an extra's module that
surfaces later (MLflow when tracking is on) into the same message. Imports nothing optional.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Sequence
from typing import TypeVar

from skinet.config.errors import UsageError

EXTRAS: dict[str, tuple[str, ...]] = {
    "train": (
        "lightning",
        "torchmetrics",
        "albumentations",
        "mlflow",
        "optuna",
        "sqlalchemy",
        "psutil",
        "pynvml",
    ),
    "onnx": ("onnx", "onnxscript", "onnxruntime"),
}
"""Importable module names each extra of ``pyproject.toml`` installs."""

_DESCRIPTIONS = {"train": "the training extra", "onnx": "the ONNX extra"}

TRAINING_MODULES = ("lightning", "torchmetrics", "albumentations")
"""What every training run imports (MLflow only when tracking is on)."""
SWEEP_MODULES = (*TRAINING_MODULES, "optuna", "sqlalchemy")
"""What an Optuna sweep imports besides."""

_REQUIRED_ATTRIBUTE = "required_modules"

H = TypeVar("H", bound=Callable[..., int])


class MissingExtraError(UsageError):
    """A subcommand needs modules of an extra that is not installed; ``skinet`` exits with 2."""


def requires(*modules: str) -> Callable[[H], H]:
    """Mark a subcommand handler as needing ``modules`` (each one of an extra's)."""
    unknown = [m for m in modules if extra_of(m) is None]
    if unknown:
        raise ValueError(f"{unknown} belong to no extra of {sorted(EXTRAS)}")

    def mark(handler: H) -> H:
        setattr(handler, _REQUIRED_ATTRIBUTE, modules)
        return handler

    return mark


def required_modules(handler: Callable[..., int]) -> tuple[str, ...]:
    """The modules ``handler`` was marked with by :func:`requires` (none if unmarked)."""
    return tuple(getattr(handler, _REQUIRED_ATTRIBUTE, ()))


def extra_of(module: str) -> str | None:
    """The extra installing the top-level package of ``module`` (``None``: no extra does)."""
    top = module.partition(".")[0]
    return next((extra for extra, names in EXTRAS.items() if top in names), None)


def is_installed(module: str) -> bool:
    """Whether ``module`` can be imported here, found without importing it."""
    try:
        return importlib.util.find_spec(module) is not None
    except ImportError:  # an import hook that refuses the name
        return False


def missing_modules(modules: Sequence[str]) -> list[str]:
    """Those of ``modules`` that cannot be imported here."""
    return [m for m in modules if not is_installed(m)]


def missing_extra_message(command: str, missing: Sequence[str]) -> str:
    """``skinet train needs the training extra: pip install 'skinet[train]' (missing: ...)``."""
    extras = sorted({extra_of(m) or "train" for m in missing})
    needs = " and ".join(_DESCRIPTIONS[e] for e in extras)
    install = f"skinet[{','.join(extras)}]"
    return f"{command} needs {needs}: pip install '{install}' (missing: {', '.join(missing)})"


def check_requirements(handler: Callable[..., int], command: str) -> None:
    """Raise :class:`MissingExtraError` if a module ``handler`` requires is not installed."""
    missing = missing_modules(required_modules(handler))
    if missing:
        raise MissingExtraError(missing_extra_message(command, missing))


def as_missing_extra(error: ModuleNotFoundError, command: str) -> MissingExtraError | None:
    """The :class:`MissingExtraError` for ``error`` if an extra provides the missing module."""
    name = error.name or ""
    if extra_of(name) is None:
        return None
    return MissingExtraError(missing_extra_message(command, [name.partition(".")[0]]))
