"""Encoder stages of :class:`skinet.models.unet2d.UNet2D`, chosen by ``encoder_residual_mode``.

Every block maps ``(N, C_in, H, W) -> (N, C_out, H / stride, W / stride)``; the first encoder
stage is built with ``stride=1`` and keeps the input resolution. Downsampling is a strided conv
in every mode (no pooling), so ``stride`` is the only knob. ``norm_layer`` (``channels ->
nn.Module``, batch norm by default) builds every normalisation layer of a block.
"""

from __future__ import annotations

from torch import Tensor, nn

from skinet.models.layers import (
    ConvNormAct,
    NormActConv,
    NormLayer,
    build_act,
    build_conv,
    build_norm,
)


class ClassicalEncoderBlock(nn.Module):
    """Original U-Net stage: strided Conv-BN-Act then Conv-BN-Act, no residual.

    Shapes: ``(N, C_in, H, W) -> (N, C_out, H / stride, W / stride)``.
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel: int,
        stride: int,
        norm_layer: NormLayer = build_norm,
    ) -> None:
        super().__init__()
        self.down = ConvNormAct(in_channels, out_channels, kernel, stride, norm_layer)
        self.refine = ConvNormAct(out_channels, out_channels, kernel, norm_layer=norm_layer)

    def forward(self, x: Tensor) -> Tensor:
        return self.refine(self.down(x))


class LocalRefinementEncoderBlock(nn.Module):
    """Post-activation: downsample, then refine with a residual from the downsampled map.

    ``h = ConvBNAct_s(x)``; ``out = Act(h + BN(Conv(ConvBNAct(h))))``.
    Shapes: ``(N, C_in, H, W) -> (N, C_out, H / stride, W / stride)``.
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel: int,
        stride: int,
        norm_layer: NormLayer = build_norm,
    ) -> None:
        super().__init__()
        self.down = ConvNormAct(in_channels, out_channels, kernel, stride, norm_layer)
        self.refine = nn.Sequential(
            ConvNormAct(out_channels, out_channels, kernel, norm_layer=norm_layer),
            build_conv(out_channels, out_channels, kernel),
            norm_layer(out_channels),
        )
        self.act = build_act()

    def forward(self, x: Tensor) -> Tensor:
        h = self.down(x)
        return self.act(h + self.refine(h))


class He2EncoderBlock(nn.Module):
    """Pre-activation residual unit with a 1x1 projection shortcut (He et al., ECCV 2016).

    ``out = Conv(Act(BN(Conv_s(Act(BN(x)))))) + P(x)`` where ``P`` is a strided 1x1 conv (the
    identity when channels and resolution already match).
    Shapes: ``(N, C_in, H, W) -> (N, C_out, H / stride, W / stride)``.
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel: int,
        stride: int,
        norm_layer: NormLayer = build_norm,
    ) -> None:
        super().__init__()
        self.residual = nn.Sequential(
            NormActConv(in_channels, out_channels, kernel, stride, norm_layer),
            NormActConv(out_channels, out_channels, kernel, norm_layer=norm_layer),
        )
        self.shortcut: nn.Module = (
            nn.Identity()
            if in_channels == out_channels and stride == 1
            else build_conv(in_channels, out_channels, 1, stride)
        )

    def forward(self, x: Tensor) -> Tensor:
        return self.residual(x) + self.shortcut(x)


class SqueezeExcitation(nn.Module):
    """Channel attention (Hu et al., CVPR 2018): ``x * sigmoid(FC(Act(FC(avgpool(x)))))``.

    The hidden width is ``max(1, channels // reduction)`` so narrow layers still work. It has no
    norm layer. The global average pool of ``nn.AdaptiveAvgPool2d(1)`` runs as a ``mean`` (its
    backward is deterministic on CUDA, unlike adaptive pooling to larger outputs).
    Shapes: ``(N, C, H, W) -> (N, C, H, W)``.
    """

    def __init__(self, channels: int, reduction: int) -> None:
        super().__init__()
        hidden = max(1, channels // reduction)
        self.excite = nn.Sequential(
            nn.AdaptiveAvgPool2d(1),
            nn.Conv2d(channels, hidden, 1),
            build_act(),
            nn.Conv2d(hidden, channels, 1),
            nn.Sigmoid(),
        )

    def forward(self, x: Tensor) -> Tensor:
        return x * self.excite(x)


class SEEncoderBlock(He2EncoderBlock):
    """:class:`He2EncoderBlock` with squeeze-and-excitation on the residual before the addition.

    Shapes: ``(N, C_in, H, W) -> (N, C_out, H / stride, W / stride)``.
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel: int,
        stride: int,
        se_reduction: int,
        norm_layer: NormLayer = build_norm,
    ) -> None:
        super().__init__(in_channels, out_channels, kernel, stride, norm_layer)
        self.excite = SqueezeExcitation(out_channels, se_reduction)

    def forward(self, x: Tensor) -> Tensor:
        return self.excite(self.residual(x)) + self.shortcut(x)


ENCODER_BLOCKS: dict[str, type[nn.Module]] = {
    "classical": ClassicalEncoderBlock,
    "local_refinement": LocalRefinementEncoderBlock,
    "he2": He2EncoderBlock,
    "se": SEEncoderBlock,
}
"""``encoder_residual_mode`` -> encoder block class."""
