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

import torch
import torch.nn.functional as F
from torch import Tensor, nn

NormLayer = Callable[[int], nn.Module]
"""``channels -> normalisation layer``, the ``norm_layer`` keyword of every block."""


class InstanceNorm(nn.GroupNorm):
    """Affine instance norm (``MODEL_CONFIG.norm: instance``) through its fastest exact kernel.

    The same function and the same state-dict keys (``weight``, ``bias``) as
    ``nn.InstanceNorm2d(C, affine=True)`` and ``nn.GroupNorm(C, C)``, so checkpoints load into
    any of the three. The kernel follows the input's memory format, as
    ``benchmarks/bench_norm.py`` measured it on the CPU (``docs/models.md`` has the figures):

    - contiguous (NCHW): ``group_norm`` with one group per channel, the fastest of all forms;
    - ``channels_last``: ``batch_norm`` over each image of the batch on its own (batch statistics
      of one image are its instance statistics), which keeps the layout; ``group_norm`` and
      ``instance_norm`` on a ``channels_last`` input are 3-5x slower per layer.
    """

    def __init__(self, num_channels: int, eps: float = 1e-5) -> None:
        super().__init__(num_channels, num_channels, eps=eps, affine=True)

    def forward(self, x: Tensor) -> Tensor:
        per_image_pixels = x.shape[-1] * x.shape[-2]
        if x.dim() == 4 and per_image_pixels > 1 and _is_channels_last(x):
            return torch.cat(
                [
                    F.batch_norm(image, None, None, self.weight, self.bias, True, 0.0, self.eps)
                    for image in x.split(1)
                ]
            )
        # Autocast runs group_norm in float32 on CUDA and batch_norm in the input's precision:
        # both forms return the input's dtype, whatever the layout.
        return F.group_norm(x, self.num_groups, self.weight, self.bias, self.eps).to(x.dtype)


def _is_channels_last(x: Tensor) -> bool:
    return x.is_contiguous(memory_format=torch.channels_last) and not x.is_contiguous()


NORM_LAYERS: dict[str, Any] = {
    "batch": nn.BatchNorm2d,
    "instance": InstanceNorm,
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


CHANNELS_LAST_BY_DEVICE: dict[str, dict[str, bool]] = {
    "cpu": {"batch": True, "instance": True, "group": False},
    "cuda": {"batch": True, "instance": False, "group": False},
}
"""Device type -> norm -> whether ``channels_last`` is the faster memory format.

The CPU row is ``benchmarks/bench_norm.py``'s measurement on 2 cores (``docs/models.md``): with
``channels_last``, batch norm and :class:`InstanceNorm` train 1.2-1.3x faster and
``nn.GroupNorm`` slower. The CUDA row is not measured: it keeps the layouts SkiNet used before
that measurement (``channels_last`` for batch norm, as the shipped configs had it; instance norm
contiguous, one ``group_norm`` kernel per layer instead of a Python loop of one ``batch_norm``
per image) until ``benchmarks/gpu_check.py`` measures them. Other devices (MPS) keep the
contiguous format.
"""


def uses_channels_last(setting: bool | None, norm: str, device_type: str) -> bool:
    """``TRAIN_CONFIG.channels_last`` resolved for ``norm`` on ``device_type``.

    ``True``/``False`` is the user's choice; ``None`` takes :data:`CHANNELS_LAST_BY_DEVICE`.
    """
    if setting is not None:
        return setting
    return CHANNELS_LAST_BY_DEVICE.get(device_type, {}).get(norm, False)
