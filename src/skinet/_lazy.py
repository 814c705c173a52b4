"""Lazy re-exports for the package ``__init__`` files (PEP 562).

``from skinet.models import UNet2D`` works, yet ``import skinet.models`` (or any of its light
submodules, as the command line does to build its parser) loads no torch: a package names its
public objects and the submodule each lives in, and the submodule is imported on first access.
Inside SkiNet, code keeps importing from the defining module, so the import graph that
import-linter checks stays the real one.

Each package ``__init__`` reads::

    __all__ = ["UNet2D"]

    if TYPE_CHECKING:  # what mypy and IDEs read
        from skinet.models.unet2d import UNet2D
    else:
        __getattr__, __dir__ = lazy_exports(__name__, __all__, {"unet2d": ("UNet2D",)})
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Iterable, Mapping


def lazy_exports(
    package: str, public: Iterable[str], exports: Mapping[str, Iterable[str]]
) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """Build a package's module-level ``__getattr__`` and ``__dir__``.

    Args:
        package: The package's ``__name__``.
        public: The package's ``__all__``; it must list exactly the names of ``exports``.
        exports: Submodule path relative to the package (``"unet2d"``, ``"callbacks.setup"``) to
            the names it defines that the package re-exports.

    Raises:
        ValueError: ``public`` and ``exports`` disagree, or a name is mapped twice.
    """
    module = sys.modules[package]  # the package being initialised
    home: dict[str, str] = {}
    for submodule, names in exports.items():
        for name in names:
            if name in home:
                raise ValueError(f"{package}: {name!r} is exported from two submodules")
            home[name] = f"{package}.{submodule}"
    if set(public) != set(home):
        raise ValueError(
            f"{package}.__all__ and its lazy exports differ: {sorted(set(public) ^ set(home))}"
        )

    def __getattr__(name: str) -> object:
        if name not in home:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(home[name]), name)
        setattr(module, name, value)  # later lookups skip __getattr__
        return value

    def __dir__() -> list[str]:
        return sorted(set(vars(module)) | set(home))

    return __getattr__, __dir__
