"""Where a config's dataset lives, and which pairs of it each split holds.

:func:`resolve_root` is the one resolver of ``DATA_CONFIG.data_dir`` (it generates the synthetic
set when that is the dataset and it is absent); :func:`index_dataset` pairs the files of the
layout found there and assigns them to train/val/test. Everything else takes their results.
"""

from __future__ import annotations

import logging
from pathlib import Path

from skinet.config.data import DataConfig
from skinet.config.experiment import ExperimentConfig
from skinet.datasets.layouts import (
    DEFAULT_DATA_DIRS,
    DatasetIndex,
    Sample,
    assign_splits,
    read_layout,
)
from skinet.datasets.synthetic import is_complete, make_synthetic_dataset
from skinet.imaging.errors import DatasetError

logger = logging.getLogger(__name__)


def data_config(cfg: ExperimentConfig | DataConfig) -> DataConfig:
    """``DATA_CONFIG`` of an experiment config, or the section itself."""
    return cfg.data if isinstance(cfg, ExperimentConfig) else cfg


def candidate_roots(
    data_dir: str | Path, mount_point: str | None, local_root: str | None
) -> list[Path]:
    """Where a ``data_dir`` is looked for: as is if absolute; else mount, local root, cwd."""
    path = Path(data_dir).expanduser()
    if path.is_absolute():
        return [path]
    bases = [Path(b).expanduser() for b in (mount_point, local_root) if b] + [Path.cwd()]
    return [base / path for base in bases]


def resolve_data_root(
    data_dir: str | Path, mount_point: str | None = None, local_root: str | None = None
) -> Path:
    """The first existing candidate of :func:`candidate_roots` (no config, no generation).

    Raises:
        DatasetError: nothing exists; the message lists every path looked for.
    """
    candidates = candidate_roots(data_dir, mount_point, local_root)
    for candidate in candidates:
        if candidate.is_dir():
            return candidate
    looked = "\n".join(f"  - {c}" for c in candidates)
    raise DatasetError(
        f"data_dir {str(data_dir)!r} not found; looked for:\n{looked}\n"
        "Set DATA_CONFIG.data_dir to an absolute path, or DATA_CONFIG.azure_blob_mount_point / "
        "DATA_CONFIG.local_data_root to the folder that contains it."
    )


def resolve_root(cfg: ExperimentConfig | DataConfig, *, generate: bool = True) -> Path:
    """The dataset folder of ``DATA_CONFIG``, generating the synthetic set when it is absent.

    ``data_dir`` absolute is used as is; relative, it is looked for under
    ``azure_blob_mount_point``, then ``local_data_root``, then the current directory.
    """
    data = data_config(cfg)
    data_dir = data.data_dir or DEFAULT_DATA_DIRS[data.dataset]
    if data.dataset != "synthetic":
        return resolve_data_root(data_dir, data.azure_blob_mount_point, data.local_data_root)
    candidates = candidate_roots(data_dir, data.azure_blob_mount_point, data.local_data_root)
    root = next((c for c in candidates if is_complete(c)), None)
    if root is not None:
        return root
    # Generate where a user would look first among the writable places: the local root (or the
    # path itself when absolute), else the current directory.
    root = candidates[1] if data.azure_blob_mount_point and len(candidates) > 1 else candidates[0]
    if not generate:
        raise DatasetError(f"synthetic dataset not generated yet at {root}")
    logger.info("generating synthetic dataset in %s", root)
    return make_synthetic_dataset(
        root,
        num_train=data.synthetic_num_train,
        num_val=data.synthetic_num_val,
        num_test=data.synthetic_num_test,
        image_size=data.synthetic_image_size,
        seed=data.split_random_seed,
    )


def index_dataset(
    cfg: ExperimentConfig | DataConfig,
) -> tuple[DatasetIndex, dict[str, list[Sample]]]:
    """The layout's pairs and their train/val/test assignment (truncated by ``max_samples``)."""
    data = data_config(cfg)
    root = resolve_root(data)
    index = read_layout(root, data.dataset, data.mask_suffix)
    if data.split_file is not None:
        from skinet.datasets.splits import apply_split_file

        splits = apply_split_file(index, data.split_file)
    else:
        splits = assign_splits(index, data.split_random_seed, data.val_fraction, data.test_fraction)
    if data.max_samples_per_split is not None:
        splits = {name: pairs[: data.max_samples_per_split] for name, pairs in splits.items()}
    return index, splits
