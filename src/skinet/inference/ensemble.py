"""Ensembles: several checkpoints whose probabilities are averaged before thresholding.

Members must share their preprocessing (``image_size``, resize mode, padding, colour
constancy, normalisation): every image is then preprocessed once and fed to every member, and
the ensemble exports as one graph. Checkpoints trained differently are refused with the field
that differs. The threshold is the mean of the members' thresholds unless one is given
(:func:`skinet.checkpoints.threshold.ensemble_mean`), except for one ``skinet cv`` folder: the
threshold its cross-validation chose on the out-of-fold images (:func:`ensemble_threshold`),
and with ``skinet cv --tune-tta`` whether to predict with flips.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from skinet.checkpoints.cv_folder import CV_RESULTS_DIR, CV_SUMMARY_FILE
from skinet.checkpoints.read import SkinetCheckpoint, build_model, load_checkpoint
from skinet.checkpoints.threshold import (
    ENSEMBLE_THRESHOLD,
    Threshold,
    ensemble_mean,
    for_flips,
    out_of_fold_threshold,
)
from skinet.config.errors import UsageError
from skinet.config.experiment import ExperimentConfig
from skinet.imaging.preprocess import build_preprocessing
from skinet.inference.predictor import Predictor
from skinet.inference.tta import predict_probs
from skinet.models.unet2d import UNet2D

log = logging.getLogger(__name__)


class EnsembleError(UsageError):
    """The checkpoints cannot form an ensemble (not found, or trained incompatibly): exit 2."""


def resolve_checkpoints(paths: Sequence[str | Path]) -> list[Path]:
    """Checkpoint files from ``.ckpt`` paths and ``skinet cv`` folders (one per finished fold).

    Raises:
        EnsembleError: a path does not exist, or a cv folder has no finished fold.
    """
    found: list[Path] = []
    for path in map(Path, paths):
        if path.is_file():
            found.append(path)
        elif path.is_dir():
            results = sorted(
                (path / CV_RESULTS_DIR).glob("fold_*.json"),
                key=lambda p: int(p.stem.split("_")[-1]),
            )
            folds = [json.loads(p.read_text()).get("best_checkpoint") for p in results]
            if not folds or None in folds:
                raise EnsembleError(
                    f"{path} is not a finished `skinet cv` folder (no {CV_RESULTS_DIR}/fold_*.json "
                    "with a best checkpoint); pass .ckpt files instead"
                )
            found += [Path(f) for f in folds]
        else:
            raise EnsembleError(f"checkpoint not found: {path}")
    return found


def ensemble_threshold(
    paths: Sequence[str | Path], checkpoints: Sequence[SkinetCheckpoint], flips: bool = False
) -> Threshold:
    """The threshold of the ensemble of ``checkpoints`` (resolved from ``paths``).

    One ``skinet cv`` folder: the threshold its cross-validation chose on the out-of-fold
    probabilities of every training image (its ``cv_results.json``), with the folds' own as
    members. Anything else, or a cv folder from before that record: the mean of the members',
    each one's threshold tuned the way the ensemble predicts (``flips``, ``--tta``) where its
    calibration recorded it (:func:`for_flips`).
    """
    members = [for_flips(checkpoint.threshold_choice, flips) for checkpoint in checkpoints]
    if len(paths) == 1 and Path(paths[0]).is_dir():
        try:
            summary = json.loads((Path(paths[0]) / CV_SUMMARY_FILE).read_text())
        except (OSError, ValueError):
            summary = None
        record = summary.get(ENSEMBLE_THRESHOLD) if isinstance(summary, dict) else None
        if isinstance(record, dict) and isinstance(record.get("value"), int | float):
            return out_of_fold_threshold(record, members)
    return ensemble_mean(members)


def ensemble_flips(threshold: Threshold) -> bool:
    """Whether an ensemble at ``threshold`` (:func:`ensemble_threshold`) predicts with flips
    unless told otherwise: only when it is a cv folder's whose ``--tune-tta`` chose them."""
    return threshold.source == "out-of-fold" and threshold.tta


def _preprocessing_signature(config: ExperimentConfig) -> dict[str, Any]:
    data = config.data
    return {
        "DATA_CONFIG.image_size": data.image_size,
        "preprocessing": build_preprocessing(data).describe(),
        "DATA_CONFIG.normalization_mode": data.normalization_mode,
        "DATA_CONFIG.mean": list(data.mean),
        "DATA_CONFIG.std": list(data.std),
    }


def warn_same_config(checkpoints: Sequence[SkinetCheckpoint]) -> None:
    """Warn when two members were trained from the same resolved config (recipe, seed, split,
    output folder): the same model twice, most often a shell pattern such as
    ``runs/<name>_*/checkpoints/best-*.ckpt`` that matched a run made again."""
    seen: dict[str, Path] = {}
    for checkpoint in checkpoints:
        key = json.dumps(checkpoint.config.to_yaml_dict(), sort_keys=True, default=str)
        if key in seen:
            log.warning(
                "%s and %s were trained from the same config (recipe, seed and split): an "
                "ensemble of the same model twice adds nothing. If a shell pattern matched more "
                "runs than you meant, give the one checkpoint",
                seen[key],
                checkpoint.path,
            )
            return
        seen[key] = checkpoint.path


def check_compatible(checkpoints: Sequence[SkinetCheckpoint]) -> None:
    """Raise :class:`EnsembleError` unless every member is preprocessed like the first."""
    if not checkpoints:
        raise EnsembleError("an ensemble needs at least one checkpoint")
    reference = _preprocessing_signature(checkpoints[0].config)
    for member in checkpoints[1:]:
        signature = _preprocessing_signature(member.config)
        for key, value in signature.items():
            if value != reference[key]:
                raise EnsembleError(
                    f"ensemble members must share their preprocessing: {key} of {member.path} "
                    f"is {value}, of {checkpoints[0].path} it is {reference[key]}. Ensemble "
                    "checkpoints trained with the same DATA_CONFIG image size, resizing and "
                    "normalisation."
                )


class EnsembleProbabilityModel(nn.Module):
    """Mean of the members' sigmoid probabilities: ``(N, 3, H, W)`` -> ``(N, 1, H, W)``."""

    def __init__(self, members: Sequence[UNet2D]) -> None:
        super().__init__()
        self.members = nn.ModuleList(members)
        self.size_multiple = max(int(m.size_multiple) for m in members)

    def forward(self, images: Tensor) -> Tensor:
        probs = torch.stack([torch.sigmoid(member(images)) for member in self.members])
        return probs.mean(dim=0)


class EnsemblePredictor(Predictor):
    """A :class:`Predictor` whose probability map is the mean of several models' maps.

    With ``tta`` each member's map is its own flip average first. Shapes as ``Predictor``.

    Args:
        models: The members (same preprocessing; see :func:`check_compatible`).
        config: The config of the first member (its preprocessing is everyone's).
        member_thresholds: Each member's own threshold (``threshold_choice.members`` when the
            ensemble's is their mean).
        member_splits: Each member's split (:func:`split_of`); members trained on different
            splits (cv folds) make the first member's ``val`` and ``train`` splits leak.
        kwargs: As :class:`Predictor` (``threshold``, ``device``, ``tta``, ...).
    """

    def __init__(
        self,
        models: Sequence[UNet2D],
        config: ExperimentConfig,
        member_thresholds: Sequence[Threshold] = (),
        member_paths: Sequence[Path] = (),
        member_splits: Sequence[tuple[Any, ...]] = (),
        **kwargs: Any,
    ) -> None:
        super().__init__(models[0], config, **kwargs)
        members = [m.eval().to(self.device) for m in models]
        if self.channels_last:
            members = [m.to(memory_format=torch.channels_last) for m in members]  # type: ignore[call-overload]
        self.members = members
        self.member_thresholds = list(member_thresholds)
        self.member_paths = list(member_paths)
        self.member_splits = list(member_splits)

    @property
    def members_share_their_split(self) -> bool:
        """Whether every member was trained on the same train/val/test split."""
        return len(set(self.member_splits)) <= 1

    @classmethod
    def from_checkpoints(
        cls,
        paths: Sequence[str | Path],
        device: str | torch.device = "auto",
        threshold: float | None = None,
        **kwargs: Any,
    ) -> EnsemblePredictor:
        """Load the checkpoints (files or cv folders); threshold: :func:`ensemble_threshold` if
        ``None``; ``tta`` (``None`` or absent): as a cv folder's ``--tune-tta`` chose, else no
        (members' own calibrations do not decide it). Without the flips a cv folder chose, its
        threshold is the one chosen without them, and with ``--tta`` on a
        cv folder that chose no flips, the one chosen with them (:func:`for_flips`)."""
        checkpoints = [load_checkpoint(p) for p in resolve_checkpoints(paths)]
        check_compatible(checkpoints)
        warn_same_config(checkpoints)
        thresholds = [c.threshold_choice for c in checkpoints]
        recorded = ensemble_threshold(paths, checkpoints, flips=bool(kwargs.get("tta")))
        if kwargs.get("tta") is None:
            kwargs["tta"] = ensemble_flips(recorded)
        recorded = for_flips(recorded, kwargs["tta"])  # --no-tta: the cv's choice without flips
        chosen = recorded if threshold is None else Threshold.given(threshold)
        return cls(
            [build_model(c) for c in checkpoints],
            checkpoints[0].config,
            thresholds,
            [c.path for c in checkpoints],
            [split_of(c.config) for c in checkpoints],
            threshold=chosen,
            device=device,
            **kwargs,
        )

    def _probabilities(self, images: Tensor, tta: bool) -> Tensor:
        """The members' mean probabilities ``(N, 1, S, S)``."""
        return torch.stack([predict_probs(m, images, tta=tta) for m in self.members]).mean(dim=0)


def build_predictor(
    paths: Sequence[str | Path], threshold: float | None = None, **kwargs: Any
) -> Predictor:
    """A :class:`Predictor` for one checkpoint file, an :class:`EnsemblePredictor` otherwise."""
    if len(paths) == 1 and Path(paths[0]).is_file():
        return Predictor.from_checkpoint(paths[0], threshold=threshold, **kwargs)
    return EnsemblePredictor.from_checkpoints(paths, threshold=threshold, **kwargs)


def split_of(config: ExperimentConfig) -> tuple[Any, ...]:
    """What decides a model's train/val/test split: the split file, else the seed and fractions."""
    data = config.data
    if data.split_file is not None:
        return ("split_file", str(data.split_file))
    return ("carved", data.dataset, data.split_random_seed, data.val_fraction, data.test_fraction)


def recorded_assignment(path: Path, split: tuple[Any, ...]) -> dict[str, str] | None:
    """``{id: split}`` a member trained on: its run folder's ``splits.csv`` (beside
    ``checkpoints/``), else its ``DATA_CONFIG.split_file``; ``None`` when neither is readable."""
    from skinet.datasets.splits import SPLIT_FILE_NAME, read_split_file
    from skinet.imaging.errors import DatasetError

    candidates = [Path(path).resolve().parent.parent / SPLIT_FILE_NAME]
    if split[0] == "split_file":
        candidates.append(Path(split[1]))
    for candidate in candidates:
        if candidate.is_file():
            try:
                return read_split_file(candidate)
            except DatasetError:
                continue
    return None


def _leaked_ids(predictor: EnsemblePredictor, split: str) -> tuple[list[str], Path] | None:
    """Images of the first member's ``split`` that another member trained or validated on
    (there it has another role), and that member; ``None`` when no image is leaked.

    Members are compared image by image through their recorded splits. Where a member's split
    is not recorded, members whose split settings (:func:`split_of`) differ leak every split.
    """
    members = list(zip(predictor.member_paths, predictor.member_splits, strict=False))
    assignments = [recorded_assignment(path, member) for path, member in members]
    first = assignments[0] if assignments else None
    if first is None or any(a is None for a in assignments):
        differing = [path for path, member in members if member != members[0][1]]
        return ([], differing[0]) if differing else None
    for (path, _), other in zip(members[1:], assignments[1:], strict=True):
        leaked = [
            i
            for i, role in first.items()
            if (split == "all" or role == split)
            and other is not None
            and other.get(i) in ("train", "val")
            and other[i] != role
        ]
        if leaked:
            return sorted(leaked), path
    return None


def check_split_not_leaked(predictor: Predictor, split: str, allow_leak: bool) -> None:
    """Refuse ``split`` of an ensemble when another member trained or validated on its images.

    The first member's split is scored; members carved with another ``split_random_seed`` (or
    split file) hold some of its ``test`` images in their training set, cv folds hold its
    ``val`` images.

    Raises:
        ValueError: Naming the split, an image and the member, and the safe alternatives,
            unless ``allow_leak``.
    """
    if allow_leak or split == "none" or not isinstance(predictor, EnsemblePredictor):
        return
    found = _leaked_ids(predictor, split)
    if found is None:
        return
    ids, member = found
    which = (
        f"{len(ids)} of its {split!r} images (e.g. {', '.join(ids[:3])}) are training or "
        f"validation images of member {member}"
        if ids
        else f"member {member} was split otherwise (DATA_CONFIG split_file, split_random_seed "
        "or fractions) and has no splits.csv beside its checkpoints/ folder to compare"
    )
    alternative = (
        "score members trained on one split, or each member on its own"
        if split == "test"
        else "use --split test (the out-of-fold scores `skinet cv` writes, "
        "<cv folder>/out_of_fold/summary.json, are the folds' own validation figures)"
    )
    raise ValueError(
        f"--split {split} of this ensemble is leaked: {which} (the first member's split is "
        f"scored), so scores or a threshold tuned on them are optimistic. To score honestly, "
        f"{alternative}; --allow-leak scores it anyway"
    )
