"""Decoder (merge) stages of :class:`skinet.models.unet2d.UNet2D`, chosen by
``merge_residual_mode``.

Every block takes the deeper decoder map ``x`` ``(N, C_in, h, w)`` and the encoder skip
``(N, C_skip, h * stride, w * stride)`` and returns ``(N, C_out, h * stride, w * stride)``.
Upsampling is a transposed conv with kernel = stride = ``stride``: learned, exact for any
integer factor, and free of the interpolate+conv checkerboard-vs-blur trade-off at this size.
``norm_layer`` (``channels -> nn.Module``, batch norm by default) builds every normalisation
layer of a block.
"""

from __future__ import annotations

from typing import ClassVar

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from skinet.models.layers import (
    ConvNormAct,
    NormActConv,
    NormLayer,
    build_act,
    build_conv,
    build_norm,
)


def build_upsample(in_channels: int, out_channels: int, stride: int) -> nn.ConvTranspose2d:
    """Return a transposed conv that upsamples by exactly ``stride`` and maps channels."""
    return nn.ConvTranspose2d(in_channels, out_channels, stride, stride=stride, bias=False)


class PreActRefinement(nn.Module):
    """Identity-shortcut pre-activation unit: ``x + (BN-Act-Conv)^num_convs (x)``.

    Shapes: ``(N, C, H, W) -> (N, C, H, W)``.
    """

    def __init__(
        self, channels: int, kernel: int, num_convs: int, norm_layer: NormLayer = build_norm
    ) -> None:
        super().__init__()
        self.residual = nn.Sequential(
            *(
                NormActConv(channels, channels, kernel, norm_layer=norm_layer)
                for _ in range(num_convs)
            )
        )

    def forward(self, x: Tensor) -> Tensor:
        return x + self.residual(x)


class ClassicalMergeBlock(nn.Module):
    """Original U-Net stage: upsample, concatenate the skip, two Conv-BN-Act, no residual."""

    def __init__(
        self,
        in_channels: int,
        skip_channels: int,
        out_channels: int,
        kernel: int,
        stride: int,
        norm_layer: NormLayer = build_norm,
    ) -> None:
        super().__init__()
        self.up = build_upsample(in_channels, out_channels, stride)
        self.fuse = nn.Sequential(
            ConvNormAct(out_channels + skip_channels, out_channels, kernel, norm_layer=norm_layer),
            ConvNormAct(out_channels, out_channels, kernel, norm_layer=norm_layer),
        )

    def forward(self, x: Tensor, skip: Tensor) -> Tensor:
        return self.fuse(torch.cat([self.up(x), skip], dim=1))


class LocalRefinementMergeBlock(nn.Module):
    """Post-activation: project-and-sum, BN-Act, then Conv-BN-Act plus a residual.

    ``h = Act(BN(Up(x) + P(skip)))``; ``out = h + ConvBNAct(h)`` with ``P`` a 1x1 projection.
    """

    def __init__(
        self,
        in_channels: int,
        skip_channels: int,
        out_channels: int,
        kernel: int,
        stride: int,
        norm_layer: NormLayer = build_norm,
    ) -> None:
        super().__init__()
        self.up = build_upsample(in_channels, out_channels, stride)
        self.project = build_conv(skip_channels, out_channels, 1)
        self.norm_act = nn.Sequential(norm_layer(out_channels), build_act())
        self.refine = ConvNormAct(out_channels, out_channels, kernel, norm_layer=norm_layer)

    def forward(self, x: Tensor, skip: Tensor) -> Tensor:
        h = self.norm_act(self.up(x) + self.project(skip))
        return h + self.refine(h)


class He2MergeBlock(nn.Module):
    """Pre-activation: upsample, concatenate, 1x1 fuse, then two refinement convs + identity.

    ``m = Fuse([Up(x), skip])``; ``out = m + (BN-Act-Conv)^2 (m)`` (He et al., ECCV 2016).
    """

    num_convs: ClassVar[int] = 2

    def __init__(
        self,
        in_channels: int,
        skip_channels: int,
        out_channels: int,
        kernel: int,
        stride: int,
        norm_layer: NormLayer = build_norm,
    ) -> None:
        super().__init__()
        self.up = build_upsample(in_channels, out_channels, stride)
        self.fuse = build_conv(out_channels + skip_channels, out_channels, 1)
        self.refine = PreActRefinement(out_channels, kernel, self.num_convs, norm_layer)

    def forward(self, x: Tensor, skip: Tensor) -> Tensor:
        return self.refine(self.fuse(torch.cat([self.up(x), skip], dim=1)))


class He1MergeBlock(He2MergeBlock):
    """:class:`He2MergeBlock` with a single refinement conv: ``out = m + BN-Act-Conv(m)``."""

    num_convs: ClassVar[int] = 1


ATTENTION_UPSAMPLE_MODES = ("nearest", "bilinear")
"""How :class:`AttentionGate` brings its coefficients to the skip's resolution."""


class AttentionGate(nn.Module):
    """Additive attention gate (Oktay et al., MIDL 2018) that reweights a skip connection.

    The skip is brought to the gate's coarse resolution by a strided conv, summed with the
    projected gate, and ``sigmoid(psi(ReLU(.)))`` gives one coefficient per coarse pixel, which
    multiplies the ``stride x stride`` block of skip pixels it was computed from.

    Args:
        upsample: ``"nearest"`` repeats each coefficient over its block (an exact integer
            upsampling whose backward is deterministic on CUDA). ``"bilinear"`` interpolates
            them, as the paper and SkiNet before checkpoint format 2 did; its CUDA backward
            raises under ``torch.use_deterministic_algorithms(True)``, so it exists only to run
            checkpoints trained with it.

    Shapes: skip ``(N, C_skip, H, W)``, gate ``(N, C_gate, H / stride, W / stride)``
    -> gated skip ``(N, C_skip, H, W)``.
    """

    def __init__(
        self,
        skip_channels: int,
        gate_channels: int,
        inter_channels: int,
        stride: int,
        upsample: str = "nearest",
    ) -> None:
        super().__init__()
        if upsample not in ATTENTION_UPSAMPLE_MODES:
            raise ValueError(
                f"attention_upsample must be one of {list(ATTENTION_UPSAMPLE_MODES)}, "
                f"got {upsample!r}"
            )
        self.upsample = upsample
        self.theta_skip = nn.Conv2d(
            skip_channels, inter_channels, stride, stride=stride, bias=False
        )
        self.phi_gate = nn.Conv2d(gate_channels, inter_channels, 1)
        self.act = build_act()
        self.psi = nn.Conv2d(inter_channels, 1, 1)

    def forward(self, skip: Tensor, gate: Tensor) -> Tensor:
        attention = self.psi(self.act(self.theta_skip(skip) + self.phi_gate(gate)))
        alpha = torch.sigmoid(attention)
        size = skip.shape[-2:]
        if self.upsample == "nearest":
            alpha = F.interpolate(alpha, size=size, mode="nearest")
        else:
            alpha = F.interpolate(alpha, size=size, mode="bilinear", align_corners=False)
        return skip * alpha


class AttentionGateMergeBlock(He2MergeBlock):
    """Gate the skip with :class:`AttentionGate` (gated by the deeper map), then merge as he2.

    ``attention_upsample`` is the gate's ``upsample`` mode.
    """

    def __init__(
        self,
        in_channels: int,
        skip_channels: int,
        out_channels: int,
        kernel: int,
        stride: int,
        norm_layer: NormLayer = build_norm,
        attention_upsample: str = "nearest",
    ) -> None:
        super().__init__(in_channels, skip_channels, out_channels, kernel, stride, norm_layer)
        self.gate = AttentionGate(
            skip_channels, in_channels, max(1, skip_channels // 2), stride, attention_upsample
        )

    def forward(self, x: Tensor, skip: Tensor) -> Tensor:
        return super().forward(x, self.gate(skip, x))


MERGE_BLOCKS: dict[str, type[nn.Module]] = {
    "classical": ClassicalMergeBlock,
    "local_refinement": LocalRefinementMergeBlock,
    "he1": He1MergeBlock,
    "he2": He2MergeBlock,
    "attention_gate": AttentionGateMergeBlock,
}
"""``merge_residual_mode`` -> merge block class."""
