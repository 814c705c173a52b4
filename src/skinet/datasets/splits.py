"""Split files: a CSV ``id,split`` that fixes every sample's train/val/test split.

Like nnU-Net's ``splits_final.json``, a split file makes a split reusable: every run writes the
split it used as ``splits.csv``, and ``DATA_CONFIG.split_file: <that file>`` trains on exactly
the same samples again. The file must name every sample the layout finds, and only those.
"""

from __future__ import annotations

import csv
from collections.abc import Mapping, Sequence
from pathlib import Path

from skinet.datasets.layouts import SPLITS, DatasetIndex, Sample
from skinet.imaging.errors import DatasetError
from skinet.runtime.files import file_sha256

SPLIT_FILE_NAME = "splits.csv"
"""The split a run used, written into its folder."""
_HEADER = ["id", "split"]
_SHOWN = 10
"""At most this many ids are listed in an error."""


def _listed(ids: Sequence[str]) -> str:
    shown = ", ".join(sorted(ids)[:_SHOWN])
    return shown + (f" and {len(ids) - _SHOWN} more" if len(ids) > _SHOWN else "")


def read_split_file(path: str | Path) -> dict[str, str]:
    """``{id: split}`` from a CSV with the header ``id,split``.

    Raises:
        DatasetError: the file is missing, has another header, an unknown split name, an
            empty id or an id twice; the message names the file and the line.
    """
    path = Path(path)
    if not path.is_file():
        raise DatasetError(f"DATA_CONFIG.split_file not found: {path.resolve()}")
    assignment: dict[str, str] = {}
    with path.open(newline="") as handle:
        rows = csv.reader(handle)
        header = [cell.strip() for cell in next(rows, [])]
        if header != _HEADER:
            raise DatasetError(
                f"{path}: the first line must be the header 'id,split', got {','.join(header)!r}"
            )
        for line, row in enumerate(rows, start=2):
            if not row or not "".join(row).strip():
                continue
            if len(row) != 2:
                raise DatasetError(f"{path}:{line}: expected 2 columns (id,split), got {row}")
            sample_id, split = row[0].strip(), row[1].strip()
            if not sample_id:
                raise DatasetError(f"{path}:{line}: empty id")
            if split not in SPLITS:
                raise DatasetError(
                    f"{path}:{line}: split {split!r} of {sample_id!r} is not one of "
                    f"{', '.join(SPLITS)}"
                )
            if sample_id in assignment:
                raise DatasetError(f"{path}:{line}: id {sample_id!r} is listed twice")
            assignment[sample_id] = split
    return assignment


def apply_split_file(index: DatasetIndex, path: str | Path) -> dict[str, list[Sample]]:
    """The samples of ``index`` (all its splits pooled) assigned as ``path`` says.

    Raises:
        DatasetError: an image found on disk is missing from the file, or the file names an id
            with no image; both lists are given.
    """
    assignment = read_split_file(path)
    samples = {s.id: s for pairs in index.splits.values() for s in pairs}
    not_listed = [i for i in samples if i not in assignment]
    not_found = [i for i in assignment if i not in samples]
    problems = []
    if not_listed:
        problems.append(
            f"{len(not_listed)} image(s) under {index.root} are not in the split file: "
            f"{_listed(not_listed)}; add a line 'id,split' for each"
        )
    if not_found:
        problems.append(
            f"{len(not_found)} id(s) of the split file have no image/mask pair under "
            f"{index.root}: {_listed(not_found)}; remove them or fix the data folder"
        )
    if problems:
        raise DatasetError(f"DATA_CONFIG.split_file {path}: " + "; ".join(problems))
    splits: dict[str, list[Sample]] = {name: [] for name in SPLITS}
    for sample_id in sorted(samples):
        splits[assignment[sample_id]].append(samples[sample_id])
    return splits


def split_rows(splits: Mapping[str, Sequence[Sample] | Sequence[str]]) -> list[tuple[str, str]]:
    """``(id, split)`` rows in the canonical order: train, val, test, each sorted by id."""
    rows = []
    for name in SPLITS:
        ids = [s.id if isinstance(s, Sample) else s for s in splits.get(name, [])]
        rows += [(sample_id, name) for sample_id in sorted(ids)]
    return rows


def write_split_file(splits: Mapping[str, Sequence[Sample] | Sequence[str]], path: Path) -> Path:
    """Write ``splits`` (samples or ids per split) as a split file; returns ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle, lineterminator="\n")
        writer.writerow(_HEADER)
        writer.writerows(split_rows(splits))
    return path


def split_file_sha256(path: Path) -> str:
    """The SHA-256 of a split file's bytes (identifies a split in the model card)."""
    return file_sha256(path)


def apply_recorded_split(
    index: DatasetIndex, path: str | Path, split: str | None = None
) -> dict[str, list[Sample]]:
    """The samples of ``index`` as a training run's own ``splits.csv`` assigned them.

    Unlike :func:`apply_split_file`, images the file does not list (added since, or left out by
    ``max_samples_per_split``) are left out rather than refused. With ``split``, only that split
    is returned and only its own images must be present: a deleted training image cannot mix
    anything into the test split.

    Raises:
        DatasetError: an image the file lists (for ``split``) is gone from ``index`` (scoring
            the rest would not score the run's split).
    """
    assignment = read_split_file(path)
    if split is not None:
        assignment = {i: name for i, name in assignment.items() if name == split}
    samples = {s.id: s for pairs in index.splits.values() for s in pairs}
    missing = sorted(i for i in assignment if i not in samples)
    if missing:
        which = "" if split is None else f" as {split!r}"
        raise DatasetError(
            f"the data under {index.root} no longer holds {len(missing)} image(s) of the split "
            f"the training run recorded in {path}{which} (e.g. {missing[:3]}): the rest would "
            "not score the run's split. Restore the data folder, or give --data-dir to score a "
            "folder as its own layout splits it"
        )
    splits: dict[str, list[Sample]] = {}
    for sample_id in sorted(assignment):
        splits.setdefault(assignment[sample_id], []).append(samples[sample_id])
    return splits
