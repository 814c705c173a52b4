"""Where a config's dataset lives, and which pairs of it each split holds.

:func:`resolve_root` is the one resolver of ``DATA_CONFIG.data_dir`` (it generates the synthetic
set when that is the dataset and it is absent); :func:`split_pairs` is the one assignment of
pairs to train/val/test. :func:`index_dataset` (training) and :func:`select_samples`
(evaluation) take their results; everything else takes theirs.
"""

from __future__ import annotations

import logging
from pathlib import Path

from skinet.config.data import DataConfig
from skinet.config.experiment import ExperimentConfig
from skinet.datasets.layouts import SPLITS, DatasetIndex, Sample, assign_splits
from skinet.datasets.registry import data_dir_of, read_layout
from skinet.datasets.splits import apply_recorded_split, apply_split_file
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
    if Path(data_dir).expanduser().is_absolute():
        hint = "No such folder: check the path (--data-dir, or DATA_CONFIG.data_dir)."
    else:
        hint = (
            "Give an absolute path (--data-dir, or DATA_CONFIG.data_dir), or set "
            "DATA_CONFIG.azure_blob_mount_point / DATA_CONFIG.local_data_root to the folder "
            "that contains it."
        )
    raise DatasetError(f"data_dir {str(data_dir)!r} not found; looked for:\n{looked}\n{hint}")


def resolve_root(cfg: ExperimentConfig | DataConfig, *, generate: bool = True) -> Path:
    """The dataset folder of ``DATA_CONFIG``, generating the synthetic set when it is absent or
    was made with other ``synthetic_*`` settings (or split seed).

    ``data_dir`` absolute is used as is; relative, it is looked for under
    ``azure_blob_mount_point``, then ``local_data_root``, then the current directory.
    """
    data = data_config(cfg)
    data_dir = data_dir_of(data)
    if data.dataset != "synthetic":
        return resolve_data_root(data_dir, data.azure_blob_mount_point, data.local_data_root)
    candidates = candidate_roots(data_dir, data.azure_blob_mount_point, data.local_data_root)
    root = next((c for c in candidates if is_complete(c)), None)
    if root is not None and not generate:
        return root
    if root is None:
        # Generate where a user would look first among the writable places: the local root (or
        # the path itself when absolute), else the current directory.
        root = (
            candidates[1] if data.azure_blob_mount_point and len(candidates) > 1 else candidates[0]
        )
        if not generate:
            raise DatasetError(f"synthetic dataset not generated yet at {root}")
        logger.info("generating synthetic dataset in %s", root)
    # An existing set made with other DATA_CONFIG.synthetic_* settings is made again.
    return make_synthetic_dataset(
        root,
        num_train=data.synthetic_num_train,
        num_val=data.synthetic_num_val,
        num_test=data.synthetic_num_test,
        image_size=data.synthetic_image_size,
        seed=data.split_random_seed,
    )


def _checkpoint_root(data: DataConfig) -> Path:
    """The dataset folder of a checkpoint's ``DATA_CONFIG`` (never generated).

    Raises:
        DatasetError: It does not exist (or is no complete synthetic set): give ``--data-dir``.
    """
    try:
        return resolve_root(data, generate=False)
    except DatasetError:
        data_dir = Path(data_dir_of(data))
        candidates = candidate_roots(data_dir, data.azure_blob_mount_point, data.local_data_root)
        if data_dir.expanduser().is_absolute():
            where = ""
        elif len(candidates) == 1:
            where = " (relative to the current folder)"
        else:
            where = " (relative to DATA_CONFIG's mount point or local root, or the current folder)"
        problem = (
            "is not a complete synthetic dataset"
            if any(c.is_dir() for c in candidates)
            else "does not exist"
        )
        looked = ", ".join(str(c) for c in candidates)
        raise DatasetError(
            f"the checkpoint's DATA_CONFIG.data_dir {data_dir}{where} {problem} (looked in "
            f"{looked}): give --data-dir with the dataset folder"
        ) from None


def split_pairs(
    index: DatasetIndex,
    data: DataConfig,
    split_file: str | Path | None = None,
    recorded_split: Path | None = None,
    split: str | None = None,
) -> dict[str, list[Sample]]:
    """Train/val/test pairs of ``index``.

    A run's own ``recorded_split`` (its ``splits.csv``) first, else ``split_file``, else the
    layout's official splits, with the missing ones carved by ``DATA_CONFIG.split_random_seed``
    and fractions. ``split`` limits a recorded split to that split (only its images must exist).
    """
    if recorded_split is not None:
        return apply_recorded_split(index, recorded_split, split)
    if split_file is not None:
        return apply_split_file(index, split_file)
    return assign_splits(index, data.split_random_seed, data.val_fraction, data.test_fraction)


def index_dataset(
    cfg: ExperimentConfig | DataConfig,
) -> tuple[DatasetIndex, dict[str, list[Sample]]]:
    """The layout's pairs and their train/val/test assignment (truncated by ``max_samples``)."""
    data = data_config(cfg)
    index = read_layout(resolve_root(data), data.dataset, data.mask_suffix)
    splits = split_pairs(index, data, data.split_file)
    if data.max_samples_per_split is not None:
        splits = {name: pairs[: data.max_samples_per_split] for name, pairs in splits.items()}
    return index, splits


def select_samples(
    cfg: ExperimentConfig | DataConfig,
    data_dir: str | Path | None = None,
    dataset: str | None = None,
    split: str = "test",
    recorded_split: Path | None = None,
) -> list[Sample]:
    """The image/mask pairs of ``split`` (or ``all``), split as training split them.

    Without ``data_dir``, the config's own folder is split by ``recorded_split`` (the training
    run's own ``splits.csv``; a data folder that no longer holds exactly its images is refused
    with the ids that differ, so ``test`` can never silently become another set of images), else
    by ``DATA_CONFIG.split_file``. A ``data_dir`` (of layout ``dataset``) is split by its layout
    alone: official splits, or carved with the config's ``split_random_seed`` and fractions.

    Raises:
        DatasetError: the split holds no pairs.
    """
    if split != "all" and split not in SPLITS:
        raise ValueError(f"split must be one of {', '.join(SPLITS)} or all, got {split!r}")
    data = data_config(cfg)
    if data_dir is None:  # the config's own folder: split as its training run split it
        root = _checkpoint_root(data)
        split_file, recorded = data.split_file, recorded_split
    else:  # another folder: split by its layout alone
        root, split_file, recorded = Path(data_dir), None, None
    index = read_layout(root, dataset or data.dataset, data.mask_suffix)
    for problem in index.problems:
        logger.warning("%s", problem)
    if split == "all":
        samples = [sample for pairs in index.splits.values() for sample in pairs]
    else:
        samples = split_pairs(index, data, split_file, recorded, split).get(split, [])
    if not samples:
        raise DatasetError(f"no image/mask pairs in split {split!r} of {root}")
    return samples
