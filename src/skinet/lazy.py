"""Lazy package exports: a name is imported from its module on first use, not at import time.

Lets ``skinet.data``, ``skinet.sweep`` and ``skinet.training`` expose their public names while
``import skinet.<package>.<light module>`` stays free of Lightning, MLflow, Optuna and
albumentations.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_getattr(package: str, exports: Mapping[str, str]) -> Callable[[str], Any]:
    """A module-level ``__getattr__`` for ``package`` resolving ``name -> exports[name]``."""

    def __getattr__(name: str) -> Any:
        if name not in exports:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(exports[name]), name)

    return __getattr__
