"""Training one run: the LightningModule, its data and callbacks, the run itself and what it leaves
behind.

The names in ``__all__`` import from here; each loads its submodule on first use, so importing the
package alone stays light.
"""

from typing import TYPE_CHECKING

from skinet._lazy import lazy_exports

__all__ = [
    "LightningModel",
    "train_and_evaluate",
    "run_training",
    "RunResult",
    "configure_reproducibility",
    "build_optimizer",
    "build_lr_scheduler",
    "ResumeError",
    "setup_logging_and_callbacks",
    "SystemMetricsThreadCallback",
    "ThroughputCallback",
    "MLflowTrainingArtifactsCallback",
    "build_dataloaders",
    "RepeatDataLoader",
    "visualize_augmented_data",
]

if TYPE_CHECKING:
    from skinet.training.callbacks.mlflow_artifacts import MLflowTrainingArtifactsCallback
    from skinet.training.callbacks.setup import setup_logging_and_callbacks
    from skinet.training.callbacks.system_metrics import SystemMetricsThreadCallback
    from skinet.training.callbacks.throughput import ThroughputCallback
    from skinet.training.data.loaders import build_dataloaders
    from skinet.training.data.samplers import RepeatDataLoader
    from skinet.training.data.visualize import visualize_augmented_data
    from skinet.training.lightning_model import LightningModel
    from skinet.training.optim import build_lr_scheduler, build_optimizer
    from skinet.training.records import RunResult
    from skinet.training.reproducibility import configure_reproducibility
    from skinet.training.resume import ResumeError
    from skinet.training.run import run_training, train_and_evaluate
else:
    __getattr__, __dir__ = lazy_exports(
        __name__,
        __all__,
        {
            "lightning_model": ("LightningModel",),
            "run": ("train_and_evaluate", "run_training"),
            "records": ("RunResult",),
            "reproducibility": ("configure_reproducibility",),
            "optim": ("build_optimizer", "build_lr_scheduler"),
            "resume": ("ResumeError",),
            "callbacks.setup": ("setup_logging_and_callbacks",),
            "callbacks.system_metrics": ("SystemMetricsThreadCallback",),
            "callbacks.throughput": ("ThroughputCallback",),
            "callbacks.mlflow_artifacts": ("MLflowTrainingArtifactsCallback",),
            "data.loaders": ("build_dataloaders",),
            "data.samplers": ("RepeatDataLoader",),
            "data.visualize": ("visualize_augmented_data",),
        },
    )
