"""``MODEL_CONFIG``: the UNet2D architecture."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from skinet.config.base import Section

EncoderResidualMode = Literal["classical", "local_refinement", "he2", "se"]
MergeResidualMode = Literal["classical", "local_refinement", "he1", "he2", "attention_gate"]
Norm = Literal["batch", "instance", "group"]
AttentionUpsample = Literal["nearest", "bilinear"]


def size_multiple(stride: int, number_of_layers: int) -> int:
    """The size a UNet2D input's height and width are padded up to a multiple of: the encoder
    downsamples ``number_of_layers - 1`` times by ``stride``."""
    return int(stride ** (number_of_layers - 1))


class UNet2DModelConfig(Section):
    """Hyperparameters of :class:`skinet.models.unet2d.UNet2D`."""

    in_channels: int = Field(3, gt=0)
    """Input image channels."""
    out_channels_layer1: int = Field(16, gt=0)
    """Output channels of the first encoder layer; channels double per layer."""
    number_of_layers: int = Field(5, ge=2)
    """Encoder layers; the decoder has ``number_of_layers - 1`` merge stages plus a final conv."""
    num_output_classes: int = Field(1, gt=0)
    """Output channels (1 for binary segmentation)."""
    kernel: int = Field(3, gt=0)
    """Convolution kernel size (odd)."""
    stride: int = Field(2, ge=2)
    """Downsampling stride in the encoder; upsampling factor in the decoder."""
    encoder_residual_mode: EncoderResidualMode = "he2"
    """Residual block type for encoder layers."""
    merge_residual_mode: MergeResidualMode = "he2"
    """Residual block type for decoder merge layers."""
    se_reduction: int = Field(16, gt=0)
    """Channel reduction of squeeze-and-excitation blocks (``encoder_residual_mode: se``)."""
    norm: Norm = "batch"
    """Normalisation layer of every block: BatchNorm, InstanceNorm (affine) or GroupNorm."""
    norm_groups: int = Field(8, gt=0)
    """GroupNorm groups (``norm: group``); must divide ``out_channels_layer1``."""
    attention_upsample: AttentionUpsample = "nearest"
    """Attention-gate upsampling (bilinear: checkpoints before format 2; CUDA-nondeterministic)."""
    deep_supervision: int = Field(0, ge=0)
    """Deep supervision: the loss also scores this many lower-resolution decoder maps (at
    1/stride, 1/stride**2, ...), each through its own 1x1 head, with weights halving per level.
    Training only: prediction and export drop the heads. At most ``number_of_layers - 2``, and
    ``DATA_CONFIG.image_size`` must be a multiple of ``stride**(number_of_layers - 1)``; 0
    turns it off."""
    validate_forward: bool = True
    """Check structurally that each decoder stage receives the skip it expects."""
    debug_forward: bool = False
    """Warn about near-zero skip activations (costly; keep off in production)."""

    @property
    def size_multiple(self) -> int:
        """Height and width multiple of the deepest map: :func:`size_multiple`."""
        return size_multiple(self.stride, self.number_of_layers)

    @property
    def smallest_side(self) -> int:
        """The smallest input side the model trains on: :attr:`size_multiple`, and above it
        under norm ``instance`` (a 1x1 bottleneck has no spread to normalise)."""
        return self.size_multiple + (1 if self.norm == "instance" else 0)

    @model_validator(mode="after")
    def _check_deep_supervision(self) -> UNet2DModelConfig:
        if self.deep_supervision > self.number_of_layers - 2:
            raise ValueError(
                f"MODEL_CONFIG.deep_supervision: {self.deep_supervision} is more than the "
                f"{self.number_of_layers - 2} decoder maps below full resolution that "
                f"number_of_layers: {self.number_of_layers} gives (use 0 to "
                f"{self.number_of_layers - 2})"
            )
        return self

    @model_validator(mode="after")
    def _check_norm_groups(self) -> UNet2DModelConfig:
        if self.norm == "group" and self.out_channels_layer1 % self.norm_groups:
            raise ValueError(
                f"MODEL_CONFIG.norm_groups: {self.norm_groups} does not divide "
                f"out_channels_layer1 ({self.out_channels_layer1}): with norm: group, every "
                "stage's channels must split into norm_groups equal groups"
            )
        return self
