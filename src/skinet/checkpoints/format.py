"""The SkiNet entry of a training checkpoint: one definition for the writer and every reader.

A training checkpoint is a Lightning checkpoint (``state_dict`` keys under ``model.``) plus
``checkpoint[CHECKPOINT_KEY]``, the :class:`CheckpointPayload` as plain data, so it loads with
``torch.load(..., weights_only=True)``. ``LightningModel.on_save_checkpoint`` writes it;
``skinet.checkpoints.read.load_checkpoint``, ``LightningModel.on_load_checkpoint`` and resuming
read it.
This module imports neither Lightning nor torch, so the prediction install can use it.

Format versions:

- **1** (no ``format_version`` key; before the deterministic attention gate): ``config``,
  ``val_optimal_threshold``, ``threshold_used``, ``mlflow_run_id``. The attention gate
  upsampled its coefficients bilinearly.
- **2**: adds ``format_version``; the attention gate upsamples by nearest unless
  ``MODEL_CONFIG.attention_upsample`` says otherwise. A format-1 payload whose model uses
  ``merge_residual_mode: attention_gate`` is read with ``attention_upsample: bilinear``, so the
  model predicts as it was trained.
- **3**: adds ``calibration``, the threshold tuned on one's own labelled images by
  ``skinet evaluate --tune-threshold --save-calibrated`` and where it was tuned. SkiNet before
  format 4 wrote only calibrated checkpoints in format 3 and every other one in format 2, but
  its configs had gained keys that an older SkiNet refuses (``init_checkpoint``,
  ``progress_log_interval_sec``, ``channels_last: null``): format 2 no longer meant "an older
  SkiNet reads it".
- **4**: every checkpoint, calibrated or not, and the config schema is pinned: the config's
  fields, types, choices and bounds are those whose
  :func:`skinet.config.schema.config_schema_fingerprint` is ``CONFIG_SCHEMAS[4]``. An older
  SkiNet refuses it with "upgrade skinet" instead of failing on an unknown config key.
- **5**: the config schema ``CONFIG_SCHEMAS[5]``, which adds ``MODEL_CONFIG.deep_supervision``
  and ``TRAIN_CONFIG.bce_weight``. A format-4 config reads with both at their defaults (no
  auxiliary heads, 0.5).
- **6**: the config schema ``CONFIG_SCHEMAS[6]``, which adds ``TRAIN_CONFIG.dice_reduction``. A
  format-5 config reads with it at its default (``batch``, the soft Dice over the whole batch).
- **7**: a calibration may carry ``tta`` (with ``tta_gain`` and ``tta_interval``): flips at
  prediction time, as ``skinet evaluate --tune-tta`` chose them, which predict follows. An
  older SkiNet would predict from one view at a threshold tuned with flips, so it must refuse
  the file. The config schema is format 6's; a format-6 calibration reads without flips. The
  calibration may also keep the threshold tuned each way (``threshold_without_tta``,
  ``threshold_with_tta``): ``--no-tta`` predicts at the first and ``--tta`` at the second;
  neither, at the one chosen.
- **8**: the config schema ``CONFIG_SCHEMAS[8]``, which adds
  ``TRAIN_CONFIG.checkpoint_config.select``. A format-7 config reads with it at its default
  (``best``).
- **9**: the config schema ``CONFIG_SCHEMAS[9]``, which adds
  ``DATA_CONFIG.progressive_resizing``. A format-8 config reads with it at its default (every
  epoch at ``image_size``).

A change to what the config accepts (a new field, choice or type) needs a new format version
with its fingerprint in :data:`CONFIG_SCHEMAS`; ``tests/checkpoints/test_format.py`` fails until
it has one. Readers read every format up to :data:`FORMAT_VERSION`: a config written before a
field existed takes its default.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any, TypeGuard

from skinet.checkpoints.threshold import (
    DEFAULT_THRESHOLD,
    Threshold,
    calibrated_threshold,
    trained_threshold,
)

__all__ = ["DEFAULT_THRESHOLD", "CheckpointError", "CheckpointPayload"]

CHECKPOINT_KEY = "skinet"
"""Key of the checkpoint entry holding the :class:`CheckpointPayload`."""
FORMAT_VERSION = 9
"""The format this version of SkiNet writes, and the newest it reads."""
CONFIG_SCHEMAS = {
    4: "d8d8b3ad48cf4875",
    5: "ea12386e5e8a821f",
    6: "64b39b33aa70ab6d",
    7: "64b39b33aa70ab6d",
    8: "657112ed969a8574",
    9: "2fc2aea269fc191d",
}
"""Fingerprint of the config schema (:func:`skinet.config.schema.config_schema_fingerprint`)
that each format version writes; formats before 4 did not pin their schema."""
LEGACY_FORMAT_VERSION = 1
"""Format of a payload without ``format_version``."""
_MODEL_SECTION = "MODEL_CONFIG"
_TRAIN_SECTION = "TRAIN_CONFIG"


class CheckpointError(ValueError):
    """A checkpoint is missing, unsafe to unpickle, or not a SkiNet training checkpoint."""


def _optional(value: Any, kind: type | tuple[type, ...], name: str, source: str) -> Any:
    if value is not None and (isinstance(value, bool) or not isinstance(value, kind)):
        raise CheckpointError(
            f"{source}: checkpoint['{CHECKPOINT_KEY}']['{name}'] must be "
            f"{getattr(kind, '__name__', 'a number')} or null, got {value!r}"
        )
    return value


def _calibration(raw: Any, source: str) -> dict[str, Any] | None:
    if raw is None:
        return None
    if not isinstance(raw, Mapping) or not _probability(raw.get("threshold")):
        raise CheckpointError(
            f"{source}: checkpoint['{CHECKPOINT_KEY}']['calibration'] must be a mapping with a "
            f"threshold in [0, 1], got {raw!r}"
        )
    for key in ("threshold_without_tta", "threshold_with_tta"):
        if key in raw and not _probability(raw[key]):
            raise CheckpointError(
                f"{source}: checkpoint['{CHECKPOINT_KEY}']['calibration']['{key}'] must be a "
                f"threshold in [0, 1], got {raw[key]!r}"
            )
    if not isinstance(raw.get("tta", False), bool):
        raise CheckpointError(
            f"{source}: checkpoint['{CHECKPOINT_KEY}']['calibration']['tta'] must be true or "
            f"false (whether to predict with flips), got {raw['tta']!r}"
        )
    return dict(raw)


def _probability(value: Any) -> TypeGuard[float]:
    return isinstance(value, int | float) and not isinstance(value, bool) and 0 <= value <= 1


def _section(config: Mapping[str, Any], name: str) -> tuple[str, Any]:
    # Section names are matched as ExperimentConfig matches them (case and underscores ignored).
    for key, value in config.items():
        if str(key).replace("_", "").lower() == name.replace("_", "").lower():
            return str(key), value
    return name, None


def _model_section(config: Mapping[str, Any]) -> tuple[str, Any]:
    return _section(config, _MODEL_SECTION)


def _fixed_threshold(config: Mapping[str, Any]) -> float | None:
    """``TRAIN_CONFIG.optimal_threshold`` of a plain-data config (``None`` when not fixed)."""
    _, train = _section(config, _TRAIN_SECTION)
    fixed = train.get("optimal_threshold") if isinstance(train, Mapping) else None
    return float(fixed) if isinstance(fixed, (int, float)) and not isinstance(fixed, bool) else None


def upgrade_legacy_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """A format-1 config with the model it was trained with spelled out for format 2.

    Only a model using ``merge_residual_mode: attention_gate`` changes: it gets
    ``attention_upsample: bilinear``, the gate that format-1 checkpoints were trained with.
    """
    upgraded = dict(config)
    key, model = _model_section(config)
    if (
        isinstance(model, Mapping)
        and model.get("merge_residual_mode") == "attention_gate"
        and "attention_upsample" not in model
    ):
        upgraded[key] = {**model, "attention_upsample": "bilinear"}
    return upgraded


@dataclass(frozen=True)
class CheckpointPayload:
    """What SkiNet stores in ``checkpoint[CHECKPOINT_KEY]``.

    Attributes:
        config: The resolved experiment config as plain data (YAML section names).
        val_optimal_threshold: Threshold chosen on the validation set (``None`` if never chosen).
        threshold_used: Threshold the training run used last.
        mlflow_run_id: The MLflow run the checkpoint belongs to; a resumed run continues it.
        format_version: The format the payload was written in (see the module docs).
        calibration: The threshold tuned on one's own images and where
            (``threshold``, ``tuned_on``, ``num_images``, ``pooled_dice``, ``source_checkpoint``,
            ``created``; ``tta`` and its gain when ``--tune-tta`` decided flips at prediction
            time); ``None`` for an uncalibrated checkpoint.
        resolved: What the config's automatic values (accelerator, precision, workers, world
            size) resolved to on the machine that wrote the checkpoint; informative only, a
            resumed run resolves them again.
    """

    config: dict[str, Any]
    val_optimal_threshold: float | None = None
    threshold_used: float | None = None
    mlflow_run_id: str | None = None
    format_version: int = FORMAT_VERSION
    calibration: dict[str, Any] | None = None
    resolved: dict[str, Any] | None = None

    @property
    def threshold_choice(self) -> Threshold:
        """The threshold to predict with and its source: the calibrated one, else the one the
        training run chose (``val_optimal_threshold``, else ``threshold_used``; ``fixed`` when
        ``TRAIN_CONFIG.optimal_threshold`` set it), else :data:`DEFAULT_THRESHOLD`."""
        if self.calibration is not None:
            return calibrated_threshold(self.calibration)
        return self.trained_threshold

    @property
    def tta(self) -> bool:
        """Whether to predict with flips: what a calibration's ``--tune-tta`` chose (else no)."""
        return self.threshold_choice.tta

    @property
    def trained_threshold(self) -> Threshold:
        """The threshold the training run left, whether or not a calibration replaced it."""
        _, train = _section(self.config, _TRAIN_SECTION)
        train = train if isinstance(train, Mapping) else {}
        selection, reference = train.get("threshold_selection"), train.get("threshold_reference")
        return trained_threshold(
            _fixed_threshold(self.config),
            self.val_optimal_threshold,
            self.threshold_used,
            selection=selection if isinstance(selection, str) else None,
            reference=float(reference) if _probability(reference) else None,
        )

    @property
    def threshold(self) -> float:
        """The value of :attr:`threshold_choice`."""
        return self.threshold_choice.value

    def to_dict(self) -> dict[str, Any]:
        """Plain data for ``checkpoint[CHECKPOINT_KEY]``, in :data:`FORMAT_VERSION` (a payload read
        from an older format, such as a calibrated copy's source, is written in it too: this
        SkiNet's schema reads its config)."""
        data = asdict(self)
        for optional in ("resolved", "calibration"):
            if data[optional] is None:
                del data[optional]
        data["format_version"] = FORMAT_VERSION
        return data

    @classmethod
    def from_dict(cls, raw: Any, source: str = "checkpoint") -> CheckpointPayload:
        """Read a payload of any known format; a format-1 config is upgraded.

        Raises:
            CheckpointError: ``raw`` is not a mapping with a ``config`` mapping, a value has the
                wrong type, or the format is newer than this SkiNet reads.
        """
        entry = f"checkpoint['{CHECKPOINT_KEY}']"
        if not isinstance(raw, Mapping):
            raise CheckpointError(f"{source}: {entry} must be a mapping, got {type(raw).__name__}")
        config = raw.get("config")
        if not isinstance(config, Mapping):
            raise CheckpointError(f"{source}: {entry} has no 'config' mapping")
        version = raw.get("format_version", LEGACY_FORMAT_VERSION)
        if isinstance(version, bool) or not isinstance(version, int) or version < 1:
            raise CheckpointError(f"{source}: {entry}['format_version'] is invalid: {version!r}")
        if version > FORMAT_VERSION:
            raise CheckpointError(
                f"{source}: written in checkpoint format {version}, but this SkiNet reads formats "
                f"up to {FORMAT_VERSION}: upgrade skinet to use it"
            )
        thresholds = [
            _optional(raw.get(name), (int, float), name, source)
            for name in ("val_optimal_threshold", "threshold_used")
        ]
        return cls(
            config=upgrade_legacy_config(config) if version == 1 else dict(config),
            val_optimal_threshold=None if thresholds[0] is None else float(thresholds[0]),
            threshold_used=None if thresholds[1] is None else float(thresholds[1]),
            mlflow_run_id=_optional(raw.get("mlflow_run_id"), str, "mlflow_run_id", source),
            format_version=version,
            calibration=_calibration(raw.get("calibration"), source),
            resolved=_optional(raw.get("resolved"), dict, "resolved", source),
        )

    @classmethod
    def from_checkpoint(
        cls, checkpoint: Mapping[str, Any], source: str = "checkpoint"
    ) -> CheckpointPayload:
        """The payload of a loaded checkpoint dict.

        Raises:
            CheckpointError: The checkpoint has no SkiNet entry, or :meth:`from_dict` refuses it.
        """
        if not isinstance(checkpoint, Mapping) or not isinstance(
            checkpoint.get(CHECKPOINT_KEY), Mapping
        ):
            raise CheckpointError(
                f"{source} is not a SkiNet checkpoint: it has no '{CHECKPOINT_KEY}' entry with "
                "the training config (write checkpoints with `skinet train`)"
            )
        return cls.from_dict(checkpoint[CHECKPOINT_KEY], source)
