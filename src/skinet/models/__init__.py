"""UNet2D and its building blocks; free of Lightning, MLflow and Optuna."""

from skinet.models.checkpoint import (
    compile_model,
    count_parameters,
    load_portable_state_dict,
    match_state_dict_keys,
    normalize_state_dict_keys,
)
from skinet.models.encoder_blocks import ENCODER_BLOCKS
from skinet.models.layers import InstanceNorm, uses_channels_last
from skinet.models.merge_blocks import MERGE_BLOCKS
from skinet.models.unet2d import UNet2D

__all__ = [
    "ENCODER_BLOCKS",
    "InstanceNorm",
    "MERGE_BLOCKS",
    "UNet2D",
    "compile_model",
    "count_parameters",
    "load_portable_state_dict",
    "match_state_dict_keys",
    "normalize_state_dict_keys",
    "uses_channels_last",
]
