"""Data pipeline: roots, pairing, checks, dataset and caches, transforms, loaders, and the rest."""

from skinet.data.dataset import SegmentationDataset
from skinet.data.errors import DatasetError, Problem
from skinet.data.layouts import DatasetIndex, Sample, read_layout
from skinet.data.loaders import (
    DataLoaders,
    RepeatDataLoader,
    build_dataloaders,
    build_dataset,
    seed_worker,
)
from skinet.data.roots import index_dataset, resolve_data_root, resolve_root
from skinet.data.synthetic import make_synthetic_dataset
from skinet.data.transforms import Normalizer, build_normalizer, build_train_transform
from skinet.data.verify import verify_dataset
from skinet.data.visualize import visualize_augmented_data

__all__ = [
    "DataLoaders",
    "DatasetError",
    "DatasetIndex",
    "Normalizer",
    "Problem",
    "RepeatDataLoader",
    "Sample",
    "SegmentationDataset",
    "build_dataloaders",
    "build_dataset",
    "build_normalizer",
    "build_train_transform",
    "index_dataset",
    "make_synthetic_dataset",
    "read_layout",
    "resolve_data_root",
    "resolve_root",
    "seed_worker",
    "verify_dataset",
    "visualize_augmented_data",
]
