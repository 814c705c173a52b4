"""Finding image/mask pairs on disk for each supported layout, and splitting them.

The readers are wired to their layout names in :mod:`skinet.datasets.registry`.

Every reader returns a :class:`DatasetIndex`: the pairs of each split found on disk plus the
problems seen while pairing (a mask without an image, an image without a mask, ...). Splits a
layout does not ship are carved deterministically out of the training pairs (or, for layouts
without an official split, out of all pairs) by ``split_random_seed``.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from skinet.imaging.errors import Problem

logger = logging.getLogger(__name__)

SPLITS = ("train", "val", "test")
IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp", ".tif", ".tiff")
MASK_SUFFIXES = (".png", ".bmp", ".gif", ".tif", ".tiff", ".jpg", ".jpeg")
ID_SUFFIXES = ("_segmentation", "_mask", "_lesion", "_prediction", "_pred")
"""Stem suffixes removed to pair predictions with ground truth by image ID."""
IGNORED_SUFFIXES = ("_proba", "_overlay", "_superpixels")
"""Files ``skinet predict`` writes beside the masks, and ISIC superpixel maps: not masks."""

ISIC2017_FOLDERS = {
    "train": ("ISIC-2017_Training_Data", "ISIC-2017_Training_Part1_GroundTruth"),
    "val": ("ISIC-2017_Validation_Data", "ISIC-2017_Validation_Part1_GroundTruth"),
    "test": ("ISIC-2017_Test_v2_Data", "ISIC-2017_Test_v2_Part1_GroundTruth"),
}
ISIC2018_FOLDERS = {
    "train": ("ISIC2018_Task1-2_Training_Input", "ISIC2018_Task1_Training_GroundTruth"),
    "val": ("ISIC2018_Task1-2_Validation_Input", "ISIC2018_Task1_Validation_GroundTruth"),
    "test": ("ISIC2018_Task1-2_Test_Input", "ISIC2018_Task1_Test_GroundTruth"),
}
PH2_IMAGES_FOLDER = "PH2 Dataset images"


@dataclass(frozen=True)
class Sample:
    """One image and its mask."""

    id: str
    image_path: Path
    mask_path: Path


@dataclass
class DatasetIndex:
    """Pairs per split (``train``/``val``/``test``) and the problems found while pairing."""

    root: Path
    splits: dict[str, list[Sample]] = field(default_factory=dict)
    problems: list[Problem] = field(default_factory=list)
    official_split: bool = True
    """Whether the splits came from the layout (``False`` when carved by ``split_random_seed``)."""


def is_image(path: Path) -> bool:
    """A regular image file of the dataset (not a hidden file or an ISIC superpixel map)."""
    name = path.name.lower()
    return (
        path.is_file()
        and path.suffix.lower() in IMAGE_SUFFIXES
        and not name.startswith(".")
        and not name.endswith("_superpixels.png")
    )


def _pair_folder(
    image_dir: Path, mask_dir: Path, mask_name: Callable[[str], str], split: str | None
) -> tuple[list[Sample], list[Problem]]:
    """Pair ``image_dir/<id>.<ext>`` with ``mask_dir/<mask_name(id)>.<ext>``; report orphans."""
    problems: list[Problem] = []
    masks: dict[str, Path] = {}
    if mask_dir.is_dir():
        for path in sorted(mask_dir.iterdir()):
            if path.is_file() and path.suffix.lower() in MASK_SUFFIXES:
                masks.setdefault(path.stem, path)
    else:
        problems.append(Problem(mask_dir, "mask folder is missing", split))
    samples: list[Sample] = []
    used: set[str] = set()
    for image_path in sorted(p for p in image_dir.iterdir() if is_image(p)):
        stem = mask_name(image_path.stem)
        mask_path = masks.get(stem)
        if mask_path is None:
            if mask_dir.is_dir():
                hint = suggest_mask_suffix(image_path.stem, stem, masks)
                problems.append(
                    Problem(
                        image_path, f"missing mask (expected {mask_dir / stem}.png){hint}", split
                    )
                )
            continue
        used.add(stem)
        samples.append(Sample(image_path.stem, image_path, mask_path))
    for stem, mask_path in masks.items():
        if stem not in used and not stem.endswith("_superpixels"):
            problems.append(Problem(mask_path, "mask without an image", split))
    if not samples:
        problems += _images_in_subfolders(image_dir, split)
    return samples, problems


def _images_in_subfolders(image_dir: Path, split: str | None) -> list[Problem]:
    """A problem naming the images below ``image_dir``'s subfolders, which are not searched."""
    nested = sorted(p for p in image_dir.glob("*/**/*") if is_image(p))
    if not nested:
        return []
    return [
        Problem(
            image_dir,
            f"{len(nested)} image(s) sit in its subfolders (e.g. "
            f"{nested[0].relative_to(image_dir)}), which are not searched: move them up into "
            "this folder, with their masks likewise",
            split,
        )
    ]


def suggest_mask_suffix(image_stem: str, expected: str, masks: dict[str, Path]) -> str:
    """``"; found X_mask.png: set DATA_CONFIG.mask_suffix: _mask"`` when such a mask exists."""
    suffixes = [
        m[len(image_stem) :]
        for m in masks
        if m.startswith(image_stem) and m != expected and not m[len(image_stem) :][:1].isalnum()
    ]
    if not suffixes:
        return ""
    suffix = min(suffixes, key=len)
    return (
        f"; found {masks[image_stem + suffix].name}: set DATA_CONFIG.mask_suffix: "
        f"{suffix or repr('')}"
    )


def _read_official(
    root: Path, folders: dict[str, tuple[str, str]], mask_suffix: str
) -> DatasetIndex:
    index = DatasetIndex(root)
    for split, (image_name, mask_name) in folders.items():
        image_dir = root / image_name
        if not image_dir.is_dir():
            continue
        samples, problems = _pair_folder(
            image_dir, root / mask_name, lambda stem: stem + mask_suffix, split
        )
        index.splits[split] = samples
        index.problems += problems
    if "train" not in index.splits:
        expected = root / folders["train"][0]
        index.problems.append(Problem(root, f"no training images found: {expected} is missing"))
    return index


def read_isic2017(root: Path) -> DatasetIndex:
    """Official ISIC 2017 Part 1 archives (``*_superpixels.png`` and ``*.csv`` are skipped)."""
    return _read_official(root, ISIC2017_FOLDERS, "_segmentation")


def read_isic2018(root: Path) -> DatasetIndex:
    """Official ISIC 2018 Task 1 archives (masks ``*_segmentation.png``)."""
    return _read_official(root, ISIC2018_FOLDERS, "_segmentation")


def read_ph2(root: Path) -> DatasetIndex:
    """PH2: ``PH2 Dataset images/IMDxxx/IMDxxx_Dermoscopic_Image/IMDxxx.bmp`` + ``..._lesion``."""
    base = root / PH2_IMAGES_FOLDER if (root / PH2_IMAGES_FOLDER).is_dir() else root
    index = DatasetIndex(root, official_split=False)
    samples: list[Sample] = []
    for case in sorted(p for p in base.iterdir() if p.is_dir() and re.fullmatch(r"IMD\d+", p.name)):
        image_path = _first_file(case / f"{case.name}_Dermoscopic_Image", case.name)
        mask_path = _first_file(case / f"{case.name}_lesion", f"{case.name}_lesion")
        if image_path is None:
            index.problems.append(Problem(case, "missing dermoscopic image"))
        elif mask_path is None:
            index.problems.append(Problem(image_path, "missing lesion mask"))
        else:
            samples.append(Sample(case.name, image_path, mask_path))
    if not samples and not index.problems:
        index.problems.append(Problem(base, "no PH2 cases (IMDxxx folders) found"))
    index.splits["all"] = samples
    return index


def _first_file(folder: Path, stem: str) -> Path | None:
    if not folder.is_dir():
        return None
    for path in sorted(folder.iterdir()):
        if path.stem == stem and path.suffix.lower() in IMAGE_SUFFIXES + MASK_SUFFIXES:
            return path
    return None


def read_folder(root: Path, mask_suffix: str = "_segmentation") -> DatasetIndex:
    """Generic ``images/`` + ``masks/`` folders: ``images/X.jpg`` pairs ``masks/X<suffix>.png``."""
    index = DatasetIndex(root, official_split=False)
    if not (root / "images").is_dir():
        index.problems.append(Problem(root / "images", "image folder is missing"))
        index.splits["all"] = []
        return index
    samples, problems = _pair_folder(
        root / "images", root / "masks", lambda stem: stem + mask_suffix, None
    )
    index.splits["all"] = samples
    index.problems += problems
    return index


def _shuffled(samples: list[Sample], seed: int) -> list[Sample]:
    import numpy as np  # here, not above: the registry of layouts is read to build the CLI

    ordered = sorted(samples, key=lambda s: s.id)
    order = np.random.default_rng(seed).permutation(len(ordered))
    return [ordered[i] for i in order]


def assign_splits(
    index: DatasetIndex, seed: int, val_fraction: float, test_fraction: float
) -> dict[str, list[Sample]]:
    """Train/val/test pairs: official splits where present, carved deterministically otherwise.

    Layouts without an official split are shuffled by ``seed`` and cut into test, val and train
    (in that order). An official layout missing ``val`` or ``test`` gets them carved from its
    training pairs, with a warning.
    """
    if not index.official_split:
        pool = _shuffled(index.splits.get("all", []), seed)
        n_test = round(len(pool) * test_fraction)
        n_val = round(len(pool) * val_fraction)
        return {
            "train": pool[n_test + n_val :],
            "val": pool[n_test : n_test + n_val],
            "test": pool[:n_test],
        }
    splits = {name: list(index.splits.get(name, [])) for name in SPLITS}
    missing = [name for name in ("val", "test") if name not in index.splits]
    if missing and splits["train"]:
        pool = _shuffled(splits["train"], seed)
        fractions = {"val": val_fraction, "test": test_fraction}
        start = 0
        for name in missing:
            count = round(len(pool) * fractions[name])
            splits[name] = pool[start : start + count]
            start += count
        splits["train"] = sorted(pool[start:], key=lambda s: s.id)
        carved = [name for name in missing if splits[name]]
        if carved:
            logger.warning(
                "%s has no official %s split; carved %s from the %d training pairs "
                "(split_random_seed=%d)",
                index.root,
                " or ".join(carved),
                ", ".join(f"{len(splits[n])} {n}" for n in carved),
                len(pool),
                seed,
            )
        for name in [name for name in missing if name not in carved]:
            logger.info(
                "%s has no official %s split and DATA_CONFIG.%s_fraction is 0: none is carved, "
                "all %d remaining training pairs train",
                index.root,
                name,
                name,
                len(splits["train"]),
            )
    return splits
