"""Data pipeline: discovery of image/mask pairs per layout, dataset + RAM cache, the
persistent cache, transforms, loaders, synthetic data, statistics, visualisation and download.

Names are imported lazily, so that prediction, which reads images through ``skinet.data.io``
and ``skinet.data.preprocess``, does not import albumentations (the training extra).
"""

from __future__ import annotations

from skinet.lazy import lazy_getattr

_EXPORTS = {
    "DataLoaders": "skinet.data.loaders",
    "DatasetError": "skinet.data.errors",
    "DatasetIndex": "skinet.data.layouts",
    "Normalizer": "skinet.data.transforms",
    "Problem": "skinet.data.errors",
    "RepeatDataLoader": "skinet.data.loaders",
    "Sample": "skinet.data.layouts",
    "SegmentationDataset": "skinet.data.dataset",
    "build_dataloaders": "skinet.data.loaders",
    "build_dataset": "skinet.data.loaders",
    "build_normalizer": "skinet.data.transforms",
    "build_train_transform": "skinet.data.transforms",
    "index_dataset": "skinet.data.roots",
    "make_synthetic_dataset": "skinet.data.synthetic",
    "read_layout": "skinet.data.layouts",
    "resolve_data_root": "skinet.data.roots",
    "resolve_root": "skinet.data.roots",
    "seed_worker": "skinet.data.loaders",
    "verify_dataset": "skinet.data.verify",
    "visualize_augmented_data": "skinet.data.visualize",
}

__all__ = sorted(_EXPORTS)

__getattr__ = lazy_getattr(__name__, _EXPORTS)
