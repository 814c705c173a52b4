"""Running a trained model on images: the predictor, post-processing, TTA, ensembles, prediction to
files and export.

The names in ``__all__`` import from here; each loads its submodule on first use, so importing the
package alone stays light.
"""

from typing import TYPE_CHECKING

from skinet._lazy import lazy_exports

__all__ = [
    "Predictor",
    "PredictReport",
    "predict_paths",
    "EnsemblePredictor",
    "EnsembleError",
    "build_predictor",
    "predict_probs",
    "postprocess_mask",
    "ExportError",
    "export_checkpoint",
]

if TYPE_CHECKING:
    from skinet.inference.ensemble import EnsembleError, EnsemblePredictor, build_predictor
    from skinet.inference.export import ExportError, export_checkpoint
    from skinet.inference.postprocess import postprocess_mask
    from skinet.inference.predict import PredictReport, predict_paths
    from skinet.inference.predictor import Predictor
    from skinet.inference.tta import predict_probs
else:
    __getattr__, __dir__ = lazy_exports(
        __name__,
        __all__,
        {
            "predictor": ("Predictor",),
            "predict": ("PredictReport", "predict_paths"),
            "ensemble": ("EnsemblePredictor", "EnsembleError", "build_predictor"),
            "tta": ("predict_probs",),
            "postprocess": ("postprocess_mask",),
            "export": ("ExportError", "export_checkpoint"),
        },
    )
