"""Inference: the predictor, post-processing, TTA, evaluation and export."""

from skinet.inference.checkpoint import (
    CheckpointError,
    SkinetCheckpoint,
    build_model,
    load_checkpoint,
)
from skinet.inference.metrics import (
    ISIC2018_JACCARD_CUTOFF,
    MaskMetrics,
    compute_mask_metrics,
    summarize_metrics,
)
from skinet.inference.postprocess import fill_holes, keep_largest_component, postprocess_mask
from skinet.inference.predictor import Predictor, resolve_device
from skinet.inference.surface import SurfaceMetrics, compute_surface_metrics
from skinet.inference.tta import predict_probs

__all__ = [
    "ISIC2018_JACCARD_CUTOFF",
    "CheckpointError",
    "MaskMetrics",
    "Predictor",
    "SkinetCheckpoint",
    "SurfaceMetrics",
    "build_model",
    "compute_mask_metrics",
    "compute_surface_metrics",
    "fill_holes",
    "keep_largest_component",
    "load_checkpoint",
    "postprocess_mask",
    "predict_probs",
    "resolve_device",
    "summarize_metrics",
]
