"""Pydantic config sections and loading of SkiNet YAML files."""

from skinet.config.arguments import (
    UsageError,
    add_config_arguments,
    non_negative_int,
    parse_overrides,
    positive_float,
    positive_int,
    probability,
)
from skinet.config.data import ISIC2017_MEAN, ISIC2017_STD, DataConfig
from skinet.config.experiment import (
    ConfigError,
    ExperimentConfig,
    apply_override,
    load_config,
    parse_config,
)
from skinet.config.model import UNet2DModelConfig
from skinet.config.sweep import SweepConfig
from skinet.config.train import (
    CheckpointConfig,
    CosineAnnealingConfig,
    EarlyStoppingConfig,
    LitLoggerConfig,
    LRSchedulerConfig,
    MLflowConfig,
    TrainConfig,
    resolve_accelerator,
)
from skinet.config.transform import TransformConfig, TransformSpec

__all__ = [
    "ISIC2017_MEAN",
    "ISIC2017_STD",
    "CheckpointConfig",
    "ConfigError",
    "CosineAnnealingConfig",
    "DataConfig",
    "EarlyStoppingConfig",
    "ExperimentConfig",
    "LRSchedulerConfig",
    "LitLoggerConfig",
    "MLflowConfig",
    "SweepConfig",
    "TrainConfig",
    "TransformConfig",
    "TransformSpec",
    "UNet2DModelConfig",
    "UsageError",
    "add_config_arguments",
    "apply_override",
    "load_config",
    "non_negative_int",
    "parse_config",
    "parse_overrides",
    "positive_float",
    "positive_int",
    "probability",
    "resolve_accelerator",
]
