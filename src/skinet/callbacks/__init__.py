"""Training callbacks and the loggers/callbacks factory used by every training entry point."""

from skinet.callbacks.mlflow_artifacts import (
    MLflowTrainingArtifactsCallback,
    SkiNetMLFlowLogger,
    best_checkpoint,
    early_stopping_state,
)
from skinet.callbacks.plots import TrainingPlotsCallback
from skinet.callbacks.resume import ResumeAwareLearningRateMonitor, ResumeStateCallback
from skinet.callbacks.setup import (
    build_litlogger,
    build_mlflow_logger,
    setup_logging_and_callbacks,
)
from skinet.callbacks.system_metrics import SystemMetricsThreadCallback
from skinet.callbacks.throughput import ThroughputCallback

__all__ = [
    "MLflowTrainingArtifactsCallback",
    "ResumeAwareLearningRateMonitor",
    "ResumeStateCallback",
    "SkiNetMLFlowLogger",
    "SystemMetricsThreadCallback",
    "ThroughputCallback",
    "TrainingPlotsCallback",
    "best_checkpoint",
    "build_litlogger",
    "build_mlflow_logger",
    "early_stopping_state",
    "setup_logging_and_callbacks",
]
