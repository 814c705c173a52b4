"""Losses, the threshold sweep, the LightningModule and the training entry point.

Names are imported lazily so that ``skinet.training.losses`` and ``skinet.training.thresholds``
stay importable without Lightning, MLflow or the data pipeline.
"""

from __future__ import annotations

from skinet.lazy import lazy_getattr

_EXPORTS = {
    "LightningModel": "skinet.training.lightning_model",
    "ResumeError": "skinet.training.run",
    "train_and_evaluate": "skinet.training.run",
    "run_training": "skinet.training.run",
    "RunResult": "skinet.training.run",
    "configure_reproducibility": "skinet.training.reproducibility",
    "build_loss": "skinet.training.losses",
    "ThresholdSweep": "skinet.training.thresholds",
    "find_best_threshold": "skinet.training.thresholds",
}

__all__ = sorted(_EXPORTS)

__getattr__ = lazy_getattr(__name__, _EXPORTS)
