"""Lightning callbacks and the loggers/callbacks factory used by every training run.

The names in ``__all__`` import from here; each loads its submodule on first use, so importing the
package alone stays light.
"""

from typing import TYPE_CHECKING

from skinet._lazy import lazy_exports

__all__ = [
    "setup_logging_and_callbacks",
    "SystemMetricsThreadCallback",
    "ThroughputCallback",
    "MLflowTrainingArtifactsCallback",
    "SkiNetMLFlowLogger",
    "EpochMetricsHistory",
    "TrainingPlotsCallback",
    "ProgressLogCallback",
    "EpochProgressBar",
    "NetworkSummary",
    "WeightEMA",
    "FreezeEncoder",
    "ProgressiveResizing",
    "ResumeStateCallback",
]

if TYPE_CHECKING:
    from skinet.training.callbacks.ema import WeightEMA
    from skinet.training.callbacks.epoch_history import EpochMetricsHistory
    from skinet.training.callbacks.freeze import FreezeEncoder
    from skinet.training.callbacks.mlflow_artifacts import (
        MLflowTrainingArtifactsCallback,
        SkiNetMLFlowLogger,
    )
    from skinet.training.callbacks.plots import TrainingPlotsCallback
    from skinet.training.callbacks.progress_log import EpochProgressBar, ProgressLogCallback
    from skinet.training.callbacks.resizing import ProgressiveResizing
    from skinet.training.callbacks.resume import ResumeStateCallback
    from skinet.training.callbacks.setup import setup_logging_and_callbacks
    from skinet.training.callbacks.summary import NetworkSummary
    from skinet.training.callbacks.system_metrics import SystemMetricsThreadCallback
    from skinet.training.callbacks.throughput import ThroughputCallback
else:
    __getattr__, __dir__ = lazy_exports(
        __name__,
        __all__,
        {
            "setup": ("setup_logging_and_callbacks",),
            "system_metrics": ("SystemMetricsThreadCallback",),
            "throughput": ("ThroughputCallback",),
            "mlflow_artifacts": ("MLflowTrainingArtifactsCallback", "SkiNetMLFlowLogger"),
            "epoch_history": ("EpochMetricsHistory",),
            "plots": ("TrainingPlotsCallback",),
            "progress_log": ("ProgressLogCallback", "EpochProgressBar"),
            "summary": ("NetworkSummary",),
            "ema": ("WeightEMA",),
            "freeze": ("FreezeEncoder",),
            "resizing": ("ProgressiveResizing",),
            "resume": ("ResumeStateCallback",),
        },
    )
