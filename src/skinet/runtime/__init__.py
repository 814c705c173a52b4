"""What the machine running SkiNet has and how a process takes part: devices and their settings,
the allocator, the process rank and seed derivation. Imports only the config.

The names in ``__all__`` import from here; each loads its submodule on first use, so importing the
package alone stays light.
"""

from typing import TYPE_CHECKING

from skinet._lazy import lazy_exports

__all__ = [
    "TrainSettings",
    "resolve_train_settings",
    "resolve_accelerator",
    "is_launch_rank_zero",
    "derive_seed",
]

if TYPE_CHECKING:
    from skinet.runtime.devices import TrainSettings, resolve_accelerator, resolve_train_settings
    from skinet.runtime.rank import is_launch_rank_zero
    from skinet.runtime.seeds import derive_seed
else:
    __getattr__, __dir__ = lazy_exports(
        __name__,
        __all__,
        {
            "devices": ("TrainSettings", "resolve_train_settings", "resolve_accelerator"),
            "rank": ("is_launch_rank_zero",),
            "seeds": ("derive_seed",),
        },
    )
