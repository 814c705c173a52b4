"""Pydantic config sections and loading of SkiNet YAML files: pydantic and YAML only.

The names in ``__all__`` import from here; each loads its submodule on first use, so importing the
package alone stays light.
"""

from typing import TYPE_CHECKING

from skinet._lazy import lazy_exports

__all__ = [
    "ExperimentConfig",
    "load_config",
    "parse_config",
    "apply_override",
    "ConfigError",
    "UsageError",
    "TrainConfig",
    "EarlyStoppingConfig",
    "CheckpointConfig",
    "LRSchedulerConfig",
    "CosineAnnealingConfig",
    "EMAConfig",
    "MLflowConfig",
    "LitLoggerConfig",
    "UNet2DModelConfig",
    "DataConfig",
    "ProgressiveResizingConfig",
    "TransformConfig",
    "TransformSpec",
    "SweepConfig",
]

if TYPE_CHECKING:
    from skinet.config.data import DataConfig, ProgressiveResizingConfig
    from skinet.config.errors import ConfigError, UsageError
    from skinet.config.experiment import ExperimentConfig, apply_override, load_config, parse_config
    from skinet.config.model import UNet2DModelConfig
    from skinet.config.sweep import SweepConfig
    from skinet.config.train import (
        CheckpointConfig,
        CosineAnnealingConfig,
        EarlyStoppingConfig,
        EMAConfig,
        LitLoggerConfig,
        LRSchedulerConfig,
        MLflowConfig,
        TrainConfig,
    )
    from skinet.config.transform import TransformConfig, TransformSpec
else:
    __getattr__, __dir__ = lazy_exports(
        __name__,
        __all__,
        {
            "experiment": ("ExperimentConfig", "load_config", "parse_config", "apply_override"),
            "errors": ("ConfigError", "UsageError"),
            "train": (
                "TrainConfig",
                "EarlyStoppingConfig",
                "CheckpointConfig",
                "LRSchedulerConfig",
                "CosineAnnealingConfig",
                "EMAConfig",
                "MLflowConfig",
                "LitLoggerConfig",
            ),
            "model": ("UNet2DModelConfig",),
            "data": ("DataConfig", "ProgressiveResizingConfig"),
            "transform": ("TransformConfig", "TransformSpec"),
            "sweep": ("SweepConfig",),
        },
    )
