"""Names shared across the package: logged metrics, sweep hyperparameters and MLflow tags.

These enums are the single source of truth for the strings that appear in YAML files,
MLflow runs and Optuna studies.
"""

from __future__ import annotations

from enum import StrEnum

STUDY_TAG = "skinet.optuna_study"
"""MLflow tag of a sweep's parent run naming its Optuna study."""


class MetricsKey(StrEnum):
    """Metric names logged by :class:`skinet.training.lightning_model.LightningModel`."""

    TRAIN_LOSS = "train_loss"
    VAL_LOSS = "val_loss"
    TEST_LOSS = "test_loss"
    TRAIN_DICE = "train_dice"
    VAL_DICE = "val_dice"
    TEST_DICE = "test_dice"
    TRAIN_IOU = "train_iou"
    VAL_IOU = "val_iou"
    TEST_IOU = "test_iou"
    VAL_BEST_DICE_AT_THRESHOLD = "val_best_dice_at_threshold"
    VAL_MEAN_DICE_PER_IMAGE = "val_mean_dice_per_image"
    VAL_MEAN_IOU_PER_IMAGE = "val_mean_iou_per_image"
    VAL_OPTIMAL_THRESHOLD = "val_optimal_threshold"
    VAL_DICE_THRESHOLD_GAIN = "val_dice_threshold_gain"
    VAL_THRESHOLD_USED = "val_threshold_used"
    TEST_MEAN_DICE_PER_IMAGE = "test_mean_dice_per_image"
    TEST_MEAN_IOU_PER_IMAGE = "test_mean_iou_per_image"
    TEST_THRESHOLD_USED = "test_threshold_used"
    GRAD_SCALE = "grad_scale"
    SAMPLES_PER_SEC = "perf/samples_per_sec"
    TIME_PER_STEP_MS = "perf/time_per_step_ms"
    TRAIN_IMAGE_SIZE = "train_image_size"

    @classmethod
    def default_monitor(cls) -> MetricsKey:
        """The schema-default metric for early stopping, checkpoints and sweeps."""
        return cls.VAL_MEAN_DICE_PER_IMAGE

    @classmethod
    def monitorable(cls) -> list[str]:
        """Epoch-level metrics that callbacks and sweeps may monitor."""
        return [
            m.value
            for m in cls
            if m.value.startswith("val_") or m.value in ("train_loss", "train_dice", "train_iou")
        ]


class HyperparamKey(StrEnum):
    """Dimensions of the Optuna grid; each member is a list field of ``SweepConfig``."""

    LR = "lr"
    WEIGHT_DECAY = "weight_decay"
    BATCH_SIZE = "batch_size"
    NUM_WORKERS = "num_workers"
    PREFETCH_FACTOR = "prefetch_factor"
    SCHEDULER_TYPE = "scheduler_type"
