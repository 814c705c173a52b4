"""Small layer factories shared by the encoder and merge blocks.

Norm and activation layers are chosen by name through one dict each, the way timm maps
``"batchnorm"`` to :class:`torch.nn.BatchNorm2d`; an unknown name raises ``ValueError``.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import torch.nn.functional as F
from torch import Tensor, nn

NORM_LAYERS: dict[str, Any] = {
    "batchnorm": nn.BatchNorm2d,
    "instancenorm": partial(nn.InstanceNorm2d, affine=True),
}
ACTIVATIONS: dict[str, Any] = {"relu": nn.ReLU, "silu": nn.SiLU, "gelu": nn.GELU}


def build_norm(channels: int, name: str = "batchnorm") -> nn.Module:
    """Return the normalisation layer ``name`` over ``channels`` channels."""
    if name not in NORM_LAYERS:
        raise ValueError(f"norm must be one of {sorted(NORM_LAYERS)}, got {name!r}")
    return NORM_LAYERS[name](channels)


def build_act(name: str = "relu") -> nn.Module:
    """Return the activation ``name``; ReLU runs in place since it always follows a fresh tensor."""
    if name not in ACTIVATIONS:
        raise ValueError(f"activation must be one of {sorted(ACTIVATIONS)}, got {name!r}")
    return nn.ReLU(inplace=True) if name == "relu" else ACTIVATIONS[name]()


def build_conv(
    in_channels: int, out_channels: int, kernel: int, stride: int = 1, bias: bool = False
) -> nn.Conv2d:
    """Return a ``kernel`` x ``kernel`` conv with "same" padding (odd kernels) and ``stride``.

    With ``H`` a multiple of ``stride`` the output is exactly ``H / stride``. Bias defaults off
    because almost every conv here is followed by a norm layer.
    """
    if kernel == 1 and stride > 1:
        return StridedPointwiseConv2d(in_channels, out_channels, 1, stride=stride, bias=bias)
    return nn.Conv2d(
        in_channels, out_channels, kernel, stride=stride, padding=kernel // 2, bias=bias
    )


class StridedPointwiseConv2d(nn.Conv2d):
    """A strided 1x1 conv computed as subsampling followed by a stride-1 1x1 conv.

    Same parameters, state-dict keys and outputs as ``nn.Conv2d(..., 1, stride=s)``. The CPU
    backward of torch 2.13's strided 1x1 conv corrupts the heap on ``channels_last`` inputs for
    some channel counts (e.g. 8 -> 16 at 128 x 128), so that kernel is never called.
    """

    def forward(self, x: Tensor) -> Tensor:
        step = self.stride
        return F.conv2d(x[:, :, :: step[0], :: step[1]], self.weight, self.bias)


class ConvNormAct(nn.Sequential):
    """Conv -> Norm -> Act (post-activation): ``(N, C_in, H, W) -> (N, C_out, H/s, W/s)``."""

    def __init__(self, in_channels: int, out_channels: int, kernel: int, stride: int = 1) -> None:
        super().__init__(
            build_conv(in_channels, out_channels, kernel, stride),
            build_norm(out_channels),
            build_act(),
        )


class NormActConv(nn.Sequential):
    """Norm -> Act -> Conv (pre-activation, He et al. 2016).

    Shapes: ``(N, C_in, H, W) -> (N, C_out, H/s, W/s)``.
    """

    def __init__(self, in_channels: int, out_channels: int, kernel: int, stride: int = 1) -> None:
        super().__init__(
            build_norm(in_channels),
            build_act(),
            build_conv(in_channels, out_channels, kernel, stride),
        )
