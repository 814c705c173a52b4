"""Torch datasets, samplers and loaders over the decoded splits, on the CPU or resident on the
device.

The names in ``__all__`` import from here; each loads its submodule on first use, so importing the
package alone stays light.
"""

from typing import TYPE_CHECKING

from skinet._lazy import lazy_exports

__all__ = [
    "SegmentationDataset",
    "RepeatDataLoader",
    "EpochShuffleSampler",
    "EvalDistributedSampler",
    "DataLoaders",
    "build_dataloaders",
    "visualize_augmented_data",
]

if TYPE_CHECKING:
    from skinet.training.data.dataset import SegmentationDataset
    from skinet.training.data.loaders import DataLoaders, build_dataloaders
    from skinet.training.data.samplers import (
        EpochShuffleSampler,
        EvalDistributedSampler,
        RepeatDataLoader,
    )
    from skinet.training.data.visualize import visualize_augmented_data
else:
    __getattr__, __dir__ = lazy_exports(
        __name__,
        __all__,
        {
            "dataset": ("SegmentationDataset",),
            "samplers": ("RepeatDataLoader", "EpochShuffleSampler", "EvalDistributedSampler"),
            "loaders": ("DataLoaders", "build_dataloaders"),
            "visualize": ("visualize_augmented_data",),
        },
    )
