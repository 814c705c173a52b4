"""Scoring a model on labelled images: evaluate, robustness under shifts, galleries, threshold
tuning, calibration and every figure SkiNet draws.

The names in ``__all__`` import from here; each loads its submodule on first use, so importing the
package alone stays light.
"""

from typing import TYPE_CHECKING

from skinet._lazy import lazy_exports

__all__ = [
    "EvaluationResult",
    "evaluate_predictor",
    "select_samples",
    "write_evaluation",
    "evaluate_mask_folders",
    "RobustnessResult",
    "evaluate_under_shifts",
    "write_robustness",
    "SHIFTS",
    "TunedThreshold",
    "tune_threshold",
    "save_calibrated_checkpoint",
    "FailureGallery",
    "compare_scores",
    "save_figure",
    "plot_learning_curves",
    "plot_threshold_curve",
]

if TYPE_CHECKING:
    from skinet.evaluation.calibration import save_calibrated_checkpoint
    from skinet.evaluation.compare import compare_scores
    from skinet.evaluation.evaluate import (
        EvaluationResult,
        evaluate_predictor,
        select_samples,
        write_evaluation,
    )
    from skinet.evaluation.figures import plot_learning_curves, plot_threshold_curve, save_figure
    from skinet.evaluation.gallery import FailureGallery
    from skinet.evaluation.mask_folders import evaluate_mask_folders
    from skinet.evaluation.robustness import (
        RobustnessResult,
        evaluate_under_shifts,
        write_robustness,
    )
    from skinet.evaluation.shifts import SHIFTS
    from skinet.evaluation.tuning import TunedThreshold, tune_threshold
else:
    __getattr__, __dir__ = lazy_exports(
        __name__,
        __all__,
        {
            "evaluate": (
                "EvaluationResult",
                "evaluate_predictor",
                "select_samples",
                "write_evaluation",
            ),
            "mask_folders": ("evaluate_mask_folders",),
            "robustness": ("RobustnessResult", "evaluate_under_shifts", "write_robustness"),
            "shifts": ("SHIFTS",),
            "tuning": ("TunedThreshold", "tune_threshold"),
            "calibration": ("save_calibrated_checkpoint",),
            "gallery": ("FailureGallery",),
            "compare": ("compare_scores",),
            "figures": ("save_figure", "plot_learning_curves", "plot_threshold_curve"),
        },
    )
