"""Small layer factories shared by the encoder and merge blocks.

Norm and activation layers are chosen by name through one dict each, the way timm maps
``"batchnorm"`` to :class:`torch.nn.BatchNorm2d`; an unknown name raises ``ValueError``.
Blocks take the norm as a plain ``norm_layer`` keyword: a callable ``channels -> nn.Module``
(:func:`build_norm` itself by default, i.e. batch norm: the guide's Conv-BN-Act), which
:func:`build_norm_layer` makes from ``MODEL_CONFIG.norm`` and ``norm_groups``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import partial
from typing import Any

import torch.nn.functional as F
from torch import Tensor, nn

NormLayer = Callable[[int], nn.Module]
"""``channels -> normalisation layer``, the ``norm_layer`` keyword of every block."""

NORM_LAYERS: dict[str, Any] = {
    "batch": nn.BatchNorm2d,
    "instance": partial(nn.InstanceNorm2d, affine=True),
    "group": nn.GroupNorm,
}
ACTIVATIONS: dict[str, Any] = {"relu": nn.ReLU, "silu": nn.SiLU, "gelu": nn.GELU}
DEFAULT_NORM_GROUPS = 8


def build_norm(channels: int, norm: str = "batch", groups: int = DEFAULT_NORM_GROUPS) -> nn.Module:
    """Return the normalisation layer ``norm`` over ``channels`` channels.

    ``groups`` is used by ``norm="group"`` only. A channel count that ``groups`` does not divide
    gets ``gcd(channels, groups)`` groups: in a UNet2D that is only the ``in_channels`` input
    normalised by a pre-activation first stage (3 RGB channels -> 1 group), since UNet2D requires
    ``out_channels_layer1`` to be a multiple of ``groups``.
    """
    if norm not in NORM_LAYERS:
        raise ValueError(f"norm must be one of {sorted(NORM_LAYERS)}, got {norm!r}")
    if norm == "group":
        return nn.GroupNorm(math.gcd(channels, groups), channels)
    return NORM_LAYERS[norm](channels)


def build_norm_layer(norm: str = "batch", groups: int = DEFAULT_NORM_GROUPS) -> NormLayer:
    """Return the ``norm_layer`` callable of the blocks for ``MODEL_CONFIG.norm``/``norm_groups``.

    Raises:
        ValueError: ``norm`` is unknown or ``groups`` is not a positive integer.
    """
    if norm not in NORM_LAYERS:
        raise ValueError(f"norm must be one of {sorted(NORM_LAYERS)}, got {norm!r}")
    if isinstance(groups, bool) or not isinstance(groups, int) or groups < 1:
        raise ValueError(f"norm_groups must be an integer >= 1, got {groups!r}")
    return partial(build_norm, norm=norm, groups=groups)


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

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel: int,
        stride: int = 1,
        norm_layer: NormLayer = build_norm,
    ) -> None:
        super().__init__(
            build_conv(in_channels, out_channels, kernel, stride),
            norm_layer(out_channels),
            build_act(),
        )


class NormActConv(nn.Sequential):
    """Norm -> Act -> Conv (pre-activation, He et al. 2016).

    Shapes: ``(N, C_in, H, W) -> (N, C_out, H/s, W/s)``.
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel: int,
        stride: int = 1,
        norm_layer: NormLayer = build_norm,
    ) -> None:
        super().__init__(
            norm_layer(in_channels),
            build_act(),
            build_conv(in_channels, out_channels, kernel, stride),
        )
