"""Losses, the threshold sweep, per-image mask metrics and surface distances: functions of tensors
and arrays.

The names in ``__all__`` import from here; each loads its submodule on first use, so importing the
package alone stays light.
"""

from typing import TYPE_CHECKING

from skinet._lazy import lazy_exports

__all__ = [
    "find_best_threshold",
    "ThresholdSweep",
    "ThresholdResult",
    "compute_threshold_counts",
    "build_loss",
    "SoftDiceLoss",
    "BCELoss",
    "BCEDiceLoss",
    "DeepSupervisionLoss",
    "MaskMetrics",
    "compute_mask_metrics",
    "summarize_metrics",
    "SurfaceMetrics",
    "compute_surface_metrics",
]

if TYPE_CHECKING:
    from skinet.metrics.losses import (
        BCEDiceLoss,
        BCELoss,
        DeepSupervisionLoss,
        SoftDiceLoss,
        build_loss,
    )
    from skinet.metrics.masks import MaskMetrics, compute_mask_metrics, summarize_metrics
    from skinet.metrics.surface import SurfaceMetrics, compute_surface_metrics
    from skinet.metrics.thresholds import (
        ThresholdResult,
        ThresholdSweep,
        compute_threshold_counts,
        find_best_threshold,
    )
else:
    __getattr__, __dir__ = lazy_exports(
        __name__,
        __all__,
        {
            "thresholds": (
                "find_best_threshold",
                "ThresholdSweep",
                "ThresholdResult",
                "compute_threshold_counts",
            ),
            "losses": (
                "build_loss",
                "SoftDiceLoss",
                "BCELoss",
                "BCEDiceLoss",
                "DeepSupervisionLoss",
            ),
            "masks": ("MaskMetrics", "compute_mask_metrics", "summarize_metrics"),
            "surface": ("SurfaceMetrics", "compute_surface_metrics"),
        },
    )
