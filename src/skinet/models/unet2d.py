"""UNet2D: a configurable U-Net for binary skin-lesion segmentation that returns raw logits."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any, Literal, overload

import torch.nn.functional as F
from torch import Tensor, nn

from skinet.config.model import UNet2DModelConfig, size_multiple
from skinet.models.encoder_blocks import ENCODER_BLOCKS
from skinet.models.layers import DEFAULT_NORM_GROUPS, NORM_LAYERS, build_norm_layer
from skinet.models.merge_blocks import ATTENTION_UPSAMPLE_MODES, MERGE_BLOCKS

logger = logging.getLogger(__name__)

NEAR_ZERO_SKIP = 1e-6
"""``debug_forward`` warns when a skip's mean absolute activation is below this."""
AUX_HEADS = "aux_heads"
"""The attribute (and state-dict prefix) of the deep-supervision heads: training only."""


def _check_positive_int(name: str, value: Any, minimum: int = 1) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")


def _check_choice(name: str, value: Any, choices: Any) -> None:
    if value not in choices:
        raise ValueError(f"{name} must be one of {sorted(choices)}, got {value!r}")


def _largest_divisor(channels: int, at_most: int) -> int:
    return max(d for d in range(1, min(channels, at_most) + 1) if channels % d == 0)


class UNet2D(nn.Module):
    """U-Net with selectable encoder and merge blocks, built as flat stage lists.

    Encoder stage ``i`` has ``out_channels_layer1 * 2**i`` channels; stage 0 keeps the input
    resolution and each later stage downsamples by ``stride``. The decoder has
    ``number_of_layers - 1`` merge stages (deepest first, each upsampling by ``stride`` and
    merging the matching encoder output) and a final 1x1 conv to ``num_output_classes``.

    Inputs of any size ``>= stride**(number_of_layers - 1)`` work: sizes that are not a
    multiple of that are reflect-padded (split evenly between both sides) and the logits are
    cropped back, so the output always has the input's height and width.

    Args:
        in_channels: Input image channels.
        out_channels_layer1: Channels of the first encoder stage; doubled per stage.
        number_of_layers: Encoder stages (>= 2).
        num_output_classes: Output channels (1 for binary segmentation).
        kernel: Odd convolution kernel size.
        stride: Encoder downsampling and decoder upsampling factor (>= 2).
        encoder_residual_mode: A key of :data:`ENCODER_BLOCKS`.
        merge_residual_mode: A key of :data:`MERGE_BLOCKS`.
        se_reduction: Squeeze-and-excitation reduction (``encoder_residual_mode="se"`` only).
        norm: Normalisation of every block: ``"batch"``, ``"instance"`` or ``"group"``.
        norm_groups: Groups of ``norm="group"``; must divide ``out_channels_layer1``. The
            ``in_channels`` input normalised by a pre-activation first stage (``he2``, ``se``)
            gets ``gcd(in_channels, norm_groups)`` groups (1 for RGB and 8 groups).
        attention_upsample: How the attention gate upsamples its coefficients
            (``merge_residual_mode="attention_gate"`` only): ``"nearest"``, or ``"bilinear"``
            for checkpoints written before checkpoint format 2 (not deterministic on CUDA).
        deep_supervision: Auxiliary 1x1 heads on the decoder maps before the last, nearest
            first: head ``k`` sees the map at ``1/stride**k`` of the input size
            (``0 <= deep_supervision <= number_of_layers - 2``). Only ``forward(images,
            deep=True)`` runs them; plain ``forward`` and inference never do.
        validate_forward: Check that every decoder stage receives the skip it expects and
            raise a ``ValueError`` naming the stage if not.
        debug_forward: Log a warning for skips whose activations are near zero (syncs the
            device once per skip; keep off in production).

    Shapes:
        ``(N, in_channels, H, W) -> (N, num_output_classes, H, W)`` logits (no sigmoid).
    """

    def __init__(
        self,
        in_channels: int = 3,
        out_channels_layer1: int = 16,
        number_of_layers: int = 5,
        num_output_classes: int = 1,
        kernel: int = 3,
        stride: int = 2,
        encoder_residual_mode: str = "he2",
        merge_residual_mode: str = "he2",
        se_reduction: int = 16,
        norm: str = "batch",
        norm_groups: int = DEFAULT_NORM_GROUPS,
        attention_upsample: str = "nearest",
        deep_supervision: int = 0,
        validate_forward: bool = True,
        debug_forward: bool = False,
    ) -> None:
        super().__init__()
        for name, value in [
            ("in_channels", in_channels),
            ("out_channels_layer1", out_channels_layer1),
            ("num_output_classes", num_output_classes),
            ("kernel", kernel),
            ("se_reduction", se_reduction),
            ("norm_groups", norm_groups),
        ]:
            _check_positive_int(name, value)
        _check_positive_int("number_of_layers", number_of_layers, minimum=2)
        _check_positive_int("stride", stride, minimum=2)
        _check_positive_int("deep_supervision", deep_supervision, minimum=0)
        if deep_supervision > number_of_layers - 2:
            raise ValueError(
                f"deep_supervision={deep_supervision} exceeds the {number_of_layers - 2} decoder "
                f"maps below full resolution that number_of_layers={number_of_layers} gives"
            )
        if kernel % 2 == 0:
            # Even kernels cannot pad "same" symmetrically, which would shift every feature map.
            raise ValueError(f"kernel must be a positive odd integer (1, 3, 5, ...), got {kernel}")
        _check_choice("encoder_residual_mode", encoder_residual_mode, ENCODER_BLOCKS)
        _check_choice("merge_residual_mode", merge_residual_mode, MERGE_BLOCKS)
        _check_choice("norm", norm, NORM_LAYERS)
        _check_choice("attention_upsample", attention_upsample, ATTENTION_UPSAMPLE_MODES)
        if norm == "group" and out_channels_layer1 % norm_groups:
            # Every stage has out_channels_layer1 * 2**i channels: then all of them divide evenly.
            raise ValueError(
                f"norm_groups={norm_groups} must divide out_channels_layer1="
                f"{out_channels_layer1} with norm='group' (e.g. norm_groups="
                f"{_largest_divisor(out_channels_layer1, norm_groups)})"
            )

        self.in_channels = in_channels
        self.norm = norm
        self.number_of_layers = number_of_layers
        self.stride = stride
        self.validate_forward = validate_forward
        self.debug_forward = debug_forward
        self.size_multiple = size_multiple(stride, number_of_layers)
        """Height and width are padded up to a multiple of this."""

        channels = [out_channels_layer1 * 2**i for i in range(number_of_layers)]
        encoder_cls = ENCODER_BLOCKS[encoder_residual_mode]
        norm_layer = build_norm_layer(norm, norm_groups)
        extra = {"se_reduction": se_reduction} if encoder_residual_mode == "se" else {}
        self.encoder = nn.ModuleList(
            encoder_cls(
                c_in,
                c_out,
                kernel=kernel,
                stride=1 if i == 0 else stride,
                norm_layer=norm_layer,
                **extra,
            )
            for i, (c_in, c_out) in enumerate(
                zip([in_channels, *channels[:-1]], channels, strict=True)
            )
        )
        merge_cls = MERGE_BLOCKS[merge_residual_mode]
        gate = (
            {"attention_upsample": attention_upsample}
            if merge_residual_mode == "attention_gate"
            else {}
        )
        # Decoder stage j merges encoder stage (L - 2 - j): deepest first.
        self.decoder = nn.ModuleList(
            merge_cls(
                c_deep, c_skip, c_skip, kernel=kernel, stride=stride, norm_layer=norm_layer, **gate
            )
            for c_deep, c_skip in zip(channels[:0:-1], channels[-2::-1], strict=True)
        )
        self.skip_channels = channels[-2::-1]
        self.head = nn.Conv2d(out_channels_layer1, num_output_classes, 1)
        self.deep_supervision = deep_supervision
        # Decoder stage (L - 2 - k) outputs channels[k] channels at 1/stride**k of the input.
        self.aux_heads = nn.ModuleList(
            nn.Conv2d(channels[k], num_output_classes, 1) for k in range(1, deep_supervision + 1)
        )

    @overload
    def forward(self, images: Tensor, deep: Literal[False] = False) -> Tensor: ...

    @overload
    def forward(self, images: Tensor, deep: Literal[True]) -> list[Tensor]: ...

    def forward(self, images: Tensor, deep: bool = False) -> Tensor | list[Tensor]:
        """Return logits ``(N, num_output_classes, H, W)`` for images ``(N, in_channels, H, W)``.

        With ``deep=True`` (deep supervision): a list of the logits followed by one map per
        auxiliary head, head ``k``'s of size ``H / stride**k x W / stride**k``. ``H`` and ``W``
        must then be multiples of :attr:`size_multiple`, so that every coarse cell covers
        ``stride**k`` pixels of the image and none of padding.

        Raises:
            ValueError: Images of the wrong shape, too small, or (with ``deep``) of a size that
                needs padding.
        """
        self._check_input(images)
        height, width = images.shape[-2:]
        pad_h, pad_w = (-height) % self.size_multiple, (-width) % self.size_multiple
        if deep and (pad_h or pad_w):
            raise ValueError(
                f"UNet2D.forward(deep=True) needs a height and width that are multiples of "
                f"{self.size_multiple} (stride**(number_of_layers - 1)), got {height}x{width}: "
                "train at a DATA_CONFIG.image_size that is one"
            )
        top, left = pad_h // 2, pad_w // 2
        if pad_h or pad_w:
            # Reflect rather than zero-pad: no artificial border for the norm layers to see.
            images = F.pad(images, (left, pad_w - left, top, pad_h - top), mode="reflect")
        maps = self._decode(self.encode(images), keep=self.deep_supervision if deep else 0)
        logits = self.head(maps[-1])[..., top : top + height, left : left + width]
        if not deep:
            return logits
        # maps[-1 - k] is the decoder map at 1/stride**k of the input: head k's.
        return [logits, *(head(maps[-1 - k]) for k, head in enumerate(self.aux_heads, start=1))]

    def encode(self, images: Tensor) -> list[Tensor]:
        """Return every encoder stage's output, shallowest first (``number_of_layers`` maps).

        ``images`` must already have a height and width divisible by :attr:`size_multiple`.
        """
        features = []
        x = images
        for stage in self.encoder:
            x = stage(x)
            features.append(x)
        return features

    def decode(self, features: Sequence[Tensor]) -> Tensor:
        """Run the merge stages on encoder outputs (shallowest first, bottleneck last).

        Returns:
            The shallowest decoder map ``(N, out_channels_layer1, H, W)``, before the head.

        Raises:
            ValueError: With ``validate_forward``, if a decoder stage gets no skip or a skip of
                the wrong shape.
        """
        return self._decode(features, keep=0)[-1]

    def _decode(self, features: Sequence[Tensor], keep: int) -> list[Tensor]:
        """:meth:`decode`, returning the last ``keep + 1`` merge stages' outputs, deepest first
        (the others are freed as soon as the next stage has used them)."""
        *skips, x = features
        if self.validate_forward and len(skips) != len(self.decoder):
            # Skips pair with stages from the bottleneck up, so the shallow stages lose theirs.
            lacking = len(skips) < len(self.decoder)
            first = f"decoder stage {len(skips)} gets no skip; " if lacking else ""
            raise ValueError(
                f"UNet2D.decode: {first}expected {len(self.decoder)} skips (one per merge "
                f"stage) plus the bottleneck, got {len(skips)} skips"
            )
        outputs = []
        first_kept = len(self.decoder) - 1 - keep
        for index, (stage, skip) in enumerate(zip(self.decoder, reversed(skips), strict=True)):
            if self.validate_forward:
                self._check_skip(index, x, skip)
            if self.debug_forward:
                self._warn_if_near_zero(index, skip)
            x = stage(x, skip)
            if index >= first_kept:
                outputs.append(x)
        return outputs

    def _check_input(self, images: Tensor) -> None:
        if images.ndim != 4 or images.shape[1] != self.in_channels:
            raise ValueError(
                f"UNet2D expects images of shape (N, {self.in_channels}, H, W), "
                f"got {tuple(images.shape)}"
            )
        height, width = images.shape[-2:]
        if min(height, width) < self.size_multiple:
            raise ValueError(
                f"input size {height}x{width} is too small: with number_of_layers="
                f"{self.number_of_layers} and stride={self.stride}, height and width must be "
                f">= stride**(number_of_layers - 1) = {self.size_multiple} (any size from there "
                f"works; sizes that are not multiples of {self.size_multiple} are padded)"
            )
        if self.norm == "instance" and max(height, width) <= self.size_multiple:
            # Padded, the bottleneck is then one pixel, which F.instance_norm refuses: say why.
            raise ValueError(
                f"input size {height}x{width} gives a 1x1 bottleneck, which norm='instance' "
                f"cannot normalise: use images larger than {self.size_multiple} pixels on one "
                "side, fewer number_of_layers, or another norm"
            )

    def _check_skip(self, index: int, x: Tensor, skip: Tensor | None) -> None:
        encoder_stage = self.number_of_layers - 2 - index
        expected = (
            x.shape[0],
            self.skip_channels[index],
            x.shape[2] * self.stride,
            x.shape[3] * self.stride,
        )
        if skip is None or tuple(skip.shape) != expected:
            got = None if skip is None else tuple(skip.shape)
            raise ValueError(
                f"UNet2D decoder stage {index} expects the skip from encoder stage "
                f"{encoder_stage} with shape {expected}, got {got}"
            )

    def _warn_if_near_zero(self, index: int, skip: Tensor) -> None:
        mean_abs = skip.detach().abs().mean().item()
        if mean_abs < NEAR_ZERO_SKIP:
            logger.warning(
                "UNet2D decoder stage %d: skip from encoder stage %d is near zero "
                "(mean |activation| = %.3g < %.0g)",
                index,
                self.number_of_layers - 2 - index,
                mean_abs,
                NEAR_ZERO_SKIP,
            )


def inference_unet(model_cfg: UNet2DModelConfig) -> UNet2D:
    """The UNet2D that ``MODEL_CONFIG`` builds for prediction: without the deep-supervision
    heads, which only train (load it with :func:`without_aux_heads`)."""
    return UNet2D(**{**model_cfg.model_dump(), "deep_supervision": 0})


def without_aux_heads(state_dict: Mapping[str, Any]) -> dict[str, Any]:
    """``state_dict`` without the deep-supervision heads, which inference never runs."""
    return {key: value for key, value in state_dict.items() if not key.startswith(AUX_HEADS)}
