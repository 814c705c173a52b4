"""``verify_dataset``: every problem of a dataset (pairing, splits, unreadable files) at once."""

from __future__ import annotations

from pathlib import Path

from skinet.config.data import DataConfig
from skinet.config.experiment import ExperimentConfig
from skinet.datasets.decoded import decode_split
from skinet.datasets.layouts import DatasetIndex, Sample
from skinet.datasets.locate import data_config, index_dataset
from skinet.imaging.errors import DatasetError, Problem


def verify_dataset(
    cfg: ExperimentConfig | DataConfig | str | Path,
    dataset: str | None = None,
    *,
    mask_suffix: str = "_segmentation",
    decode: bool = True,
) -> list[Problem]:
    """Every problem of a dataset: pairing, splits, and (``decode``) each file's content.

    Args:
        cfg: A config, or a dataset folder together with ``dataset`` (the layout name).
        dataset: Layout name when ``cfg`` is a folder.
        mask_suffix: Mask suffix of the ``folder`` layout when ``cfg`` is a folder.
        decode: Also decode every image and mask (slower, catches corrupt files).
    """
    if isinstance(cfg, (str, Path)):
        if dataset is None:
            raise ValueError("verify_dataset(root) needs dataset= (the layout name)")
        data = DataConfig(
            dataset=dataset, data_dir=str(Path(cfg).resolve()), mask_suffix=mask_suffix
        )  # type: ignore[arg-type]
    else:
        data = data_config(cfg)
    try:
        index, splits = index_dataset(data)
    except DatasetError as exc:
        return exc.problems or [Problem(Path(data.data_dir or "."), str(exc))]
    return index_problems(index, splits, decode=decode)


def index_problems(
    index: DatasetIndex, splits: dict[str, list[Sample]], *, decode: bool = True
) -> list[Problem]:
    """Pairing problems, empty required splits and (``decode``) every unreadable file."""
    problems = list(index.problems) + split_problems(index, splits)
    if decode:
        problems += decode_problems(splits)
    return problems


def decode_problems(splits: dict[str, list[Sample]]) -> list[Problem]:
    """Every unreadable file of the paired samples (decoded for the check only, not kept)."""
    problems: list[Problem] = []
    for name, pairs in splits.items():
        problems += decode_split(pairs, 8, keep=False, split=name).problems
    return problems


def split_problems(index: DatasetIndex, splits: dict[str, list[Sample]]) -> list[Problem]:
    """A problem for each of ``train`` and ``val`` that holds no pair."""
    problems = []
    for name in ("train", "val"):
        if not splits.get(name):
            problems.append(Problem(index.root, f"{name} split is empty"))
    return problems
