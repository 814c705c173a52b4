"""UNet2D: every mode combination, odd sizes, bad settings, forward checks, channels_last."""

from __future__ import annotations

import itertools
import logging
from typing import Any

import pytest
import torch
from torch import nn

from skinet.checkpoints.state_dict import count_parameters
from skinet.config.model import UNet2DModelConfig
from skinet.models.encoder_blocks import ENCODER_BLOCKS
from skinet.models.layers import InstanceNorm
from skinet.models.merge_blocks import MERGE_BLOCKS
from skinet.models.unet2d import UNet2D

TINY: dict[str, Any] = {"out_channels_layer1": 4, "number_of_layers": 3}
COMBOS = list(itertools.product(ENCODER_BLOCKS, MERGE_BLOCKS))


def build_tiny(**overrides: Any) -> UNet2D:
    torch.manual_seed(0)
    return UNet2D(**{**TINY, **overrides})


def check_train_and_eval(model: UNet2D, images: torch.Tensor, num_classes: int = 1) -> None:
    """Shape, finiteness, a gradient for every parameter, deterministic eval."""
    logits = model.train()(images)
    assert logits.shape == (images.shape[0], num_classes, *images.shape[-2:])
    assert torch.isfinite(logits).all()
    logits.square().mean().backward()
    no_grad = [name for name, p in model.named_parameters() if p.grad is None]
    assert not no_grad, f"parameters without gradient: {no_grad}"
    model.eval()
    with torch.no_grad():
        torch.testing.assert_close(model(images), model(images), rtol=0, atol=0)


@pytest.mark.parametrize(("encoder_mode", "merge_mode"), COMBOS)
def test_every_combination_trains_and_evaluates(encoder_mode: str, merge_mode: str) -> None:
    model = build_tiny(encoder_residual_mode=encoder_mode, merge_residual_mode=merge_mode)
    check_train_and_eval(model, torch.randn(2, 3, 32, 32))


@pytest.mark.parametrize(
    "overrides",
    [
        {"number_of_layers": 2},
        {"number_of_layers": 4},
        {"kernel": 1},
        {"kernel": 5},
        {"out_channels_layer1": 8},
        {"stride": 3, "number_of_layers": 2},
        {"in_channels": 1, "num_output_classes": 2},
        {"encoder_residual_mode": "se", "se_reduction": 64},
    ],
    ids=lambda o: "-".join(f"{k}={v}" for k, v in o.items()),
)
def test_non_default_settings(overrides: dict[str, Any]) -> None:
    model = build_tiny(**overrides)
    images = torch.randn(2, overrides.get("in_channels", 3), 32, 32)
    check_train_and_eval(model, images, overrides.get("num_output_classes", 1))


def test_builds_from_config_with_defaults() -> None:
    model = UNet2D(**UNet2DModelConfig().model_dump())
    assert len(model.encoder) == 5 and len(model.decoder) == 4
    assert count_parameters(model) == count_parameters(model, trainable_only=True) > 0
    with torch.no_grad():
        assert model.eval()(torch.randn(1, 3, 16, 16)).shape == (1, 1, 16, 16)


@pytest.mark.parametrize(
    ("height", "width", "overrides"),
    [(37, 45, {}), (33, 32, {}), (4, 5, {}), (31, 17, {"encoder_residual_mode": "classical"})],
)
def test_any_size_gives_same_size_output(height: int, width: int, overrides: Any) -> None:
    model = build_tiny(merge_residual_mode="attention_gate", **overrides)
    logits = model(torch.randn(2, 3, height, width))
    assert logits.shape == (2, 1, height, width)
    assert torch.isfinite(logits).all()


def test_padding_crops_back_to_the_original_pixels() -> None:
    """The first row/column of the output must come from the input, not from the padding."""
    model = build_tiny().eval()
    images = torch.randn(1, 3, 30, 30)
    with torch.no_grad():
        padded_logits = model(torch.nn.functional.pad(images, (1, 1, 1, 1), mode="reflect"))
        assert torch.allclose(model(images), padded_logits[..., 1:-1, 1:-1], atol=1e-5)


@pytest.mark.parametrize(("height", "width"), [(3, 32), (32, 2)])
def test_too_small_input_names_the_working_sizes(height: int, width: int) -> None:
    with pytest.raises(ValueError, match=r"too small.*>= stride\*\*\(number_of_layers - 1\) = 4"):
        build_tiny()(torch.randn(1, 3, height, width))


@pytest.mark.parametrize("shape", [(1, 1, 32, 32), (3, 32, 32)])
def test_wrong_input_shape_raises(shape: tuple[int, ...]) -> None:
    with pytest.raises(ValueError, match=r"\(N, 3, H, W\)"):
        build_tiny()(torch.randn(*shape))


@pytest.mark.parametrize(
    ("field", "value", "allowed"),
    [
        ("encoder_residual_mode", "resnet", "'classical', 'he2', 'local_refinement', 'se'"),
        ("merge_residual_mode", "he3", "'attention_gate', 'classical', 'he1', 'he2'"),
        ("number_of_layers", 1, ">= 2"),
        ("kernel", 4, "odd"),
        ("kernel", 0, ">= 1"),
        ("stride", 1, ">= 2"),
        ("in_channels", 0, ">= 1"),
        ("out_channels_layer1", -4, ">= 1"),
        ("num_output_classes", 0, ">= 1"),
        ("se_reduction", 0, ">= 1"),
        ("norm", "layer", "'batch', 'group', 'instance'"),
        ("norm_groups", 0, ">= 1"),
        ("attention_upsample", "bicubic", "'bilinear', 'nearest'"),
        ("out_channels_layer1", 4.0, ">= 1"),
    ],
)
def test_invalid_settings_name_the_field(field: str, value: Any, allowed: str) -> None:
    with pytest.raises(ValueError, match=field) as excinfo:
        UNet2D(**{**TINY, field: value})
    assert allowed in str(excinfo.value)


def test_decoder_stage_missing_skip_is_named() -> None:
    model = build_tiny()
    features = model.encode(torch.randn(2, 3, 32, 32))
    with pytest.raises(ValueError, match="decoder stage 1 gets no skip; expected 2 skips"):
        model.decode(features[1:])
    with pytest.raises(ValueError, match="expected 2 skips .* got 3 skips"):
        model.decode([features[0], *features])


def test_decoder_stage_wrong_skip_is_named() -> None:
    model = build_tiny()
    shallow, middle, bottleneck = model.encode(torch.randn(2, 3, 32, 32))
    with pytest.raises(ValueError, match=r"decoder stage 0 expects the skip from encoder stage 1"):
        model.decode([middle, shallow, bottleneck])


def test_debug_forward_warns_about_near_zero_skip(caplog: pytest.LogCaptureFixture) -> None:
    model = build_tiny(debug_forward=True)
    images = torch.randn(2, 3, 32, 32)
    with caplog.at_level(logging.WARNING, logger="skinet.models"):
        model(images)
        assert not caplog.records
        model.encoder[1].register_forward_hook(lambda _m, _i, out: torch.zeros_like(out))
        model(images)
    assert len(caplog.records) == 1
    assert "decoder stage 0: skip from encoder stage 1 is near zero" in caplog.records[0].message


@pytest.mark.parametrize("merge_mode", ["classical", "attention_gate"])
def test_channels_last_matches_contiguous(merge_mode: str) -> None:
    model = build_tiny(encoder_residual_mode="se", merge_residual_mode=merge_mode).eval()
    images = torch.randn(2, 3, 37, 45)
    with torch.no_grad():
        expected = model(images)
        model = model.to(memory_format=torch.channels_last)
        actual = model(images.contiguous(memory_format=torch.channels_last))
    torch.testing.assert_close(actual, expected, rtol=1e-4, atol=1e-5)


def test_stages_are_flat_module_lists() -> None:
    model = build_tiny()
    assert isinstance(model.encoder, nn.ModuleList) and isinstance(model.decoder, nn.ModuleList)
    assert all(".submodule." not in key for key in model.state_dict())


def test_strided_pointwise_conv_matches_conv2d() -> None:
    from torch import nn

    from skinet.models.layers import StridedPointwiseConv2d

    reference = nn.Conv2d(8, 16, 1, stride=2, bias=True)
    conv = StridedPointwiseConv2d(8, 16, 1, stride=2, bias=True)
    conv.load_state_dict(reference.state_dict())
    images = torch.randn(2, 8, 33, 47)
    assert conv(images).shape == reference(images).shape
    torch.testing.assert_close(conv(images), reference(images))


CHANNELS_LAST_BACKWARD = """
import torch
from skinet.models.encoder_blocks import He2EncoderBlock
block = He2EncoderBlock(8, 16, 3, 2).to(memory_format=torch.channels_last)
for _ in range(5):
    images = torch.randn(8, 8, 128, 128).contiguous(memory_format=torch.channels_last)
    block(images).sum().backward()
"""


@pytest.mark.process
def test_channels_last_backward_of_projection_shortcut_does_not_corrupt_memory() -> None:
    # A strided 1x1 conv here crashed the process (heap corruption) on CPU; run it isolated.
    import subprocess
    import sys

    proc = subprocess.run(
        [sys.executable, "-c", CHANNELS_LAST_BACKWARD], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr[-2000:]


NORM_TYPES: dict[str, type[nn.Module]] = {
    "batch": nn.BatchNorm2d,
    "instance": InstanceNorm,
    "group": nn.GroupNorm,
}


@pytest.mark.parametrize("norm", sorted(NORM_TYPES))
@pytest.mark.parametrize(("encoder_mode", "merge_mode"), COMBOS)
def test_every_norm_builds_its_layers_and_trains_a_step(
    encoder_mode: str, merge_mode: str, norm: str
) -> None:
    model = build_tiny(
        encoder_residual_mode=encoder_mode, merge_residual_mode=merge_mode, norm=norm, norm_groups=2
    )
    norms = [m for m in model.modules() if isinstance(m, tuple(NORM_TYPES.values()))]
    assert norms and all(type(m) is NORM_TYPES[norm] for m in norms)
    before = [p.detach().clone() for p in model.parameters()]
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    logits = model.train()(torch.randn(2, 3, 16, 16))
    loss = nn.functional.binary_cross_entropy_with_logits(logits, torch.ones_like(logits))
    loss.backward()
    no_grad = [n for n, p in model.named_parameters() if p.grad is None]
    assert torch.isfinite(loss) and not no_grad, f"parameters without gradient: {no_grad}"
    assert all(torch.isfinite(p.grad).all() for p in model.parameters())  # type: ignore[arg-type]
    optimizer.step()
    assert all(torch.isfinite(p).all() for p in model.parameters())
    assert not all(torch.equal(p, old) for p, old in zip(model.parameters(), before, strict=True))


def test_group_norm_of_the_rgb_input_uses_the_common_divisor() -> None:
    # he2 normalises the 3-channel input first: gcd(3, 4) = 1 group there, 4 everywhere else.
    model = build_tiny(encoder_residual_mode="he2", norm="group", norm_groups=4)
    groups = [
        (m.num_channels, m.num_groups) for m in model.modules() if isinstance(m, nn.GroupNorm)
    ]
    assert groups[0] == (3, 1)
    assert all(g == 4 and c % 4 == 0 for c, g in groups[1:])


def test_norm_groups_must_divide_the_first_stage_channels() -> None:
    with pytest.raises(ValueError, match=r"norm_groups=3 must divide out_channels_layer1=4.*=2"):
        build_tiny(norm="group", norm_groups=3)
    build_tiny(norm="batch", norm_groups=3)  # ignored by the other norms
    with pytest.raises(ValueError, match=r"MODEL_CONFIG.norm_groups: 3 does not divide"):
        UNet2DModelConfig(norm="group", norm_groups=3, out_channels_layer1=16)


def test_instance_norm_on_a_one_pixel_bottleneck_is_named() -> None:
    model = build_tiny(norm="instance")
    assert model(torch.randn(2, 3, 5, 8)).shape == (2, 1, 5, 8)  # 2 x 2 bottleneck
    with pytest.raises(ValueError, match=r"4x4 gives a 1x1 bottleneck.*norm='instance'"):
        model(torch.randn(2, 3, 4, 4))


@pytest.mark.parametrize(("upsample", "blockwise"), [("nearest", True), ("bilinear", False)])
def test_attention_gate_upsampling(upsample: str, blockwise: bool) -> None:
    from skinet.models.merge_blocks import AttentionGate

    torch.manual_seed(0)
    gate = AttentionGate(4, 8, 2, stride=2, upsample=upsample)
    alpha = gate(torch.ones(1, 4, 8, 8), torch.randn(1, 8, 4, 4))[0, 0]
    # Nearest: each coefficient covers exactly the 2 x 2 skip block it was computed from.
    blocks = alpha.reshape(4, 2, 4, 2).permute(0, 2, 1, 3).reshape(4, 4, 4)
    assert torch.equal(blocks, blocks[..., :1].expand(-1, -1, 4)) is blockwise


@pytest.mark.parametrize(("stride", "layers", "expected"), [(2, 5, 16), (2, 3, 4), (3, 3, 9)])
def test_config_and_model_agree_on_the_size_multiple(
    stride: int, layers: int, expected: int
) -> None:
    # The config validator (deep supervision) and the model's padding read the same value.
    config = UNet2DModelConfig(out_channels_layer1=4, number_of_layers=layers, stride=stride)
    model = UNet2D(**config.model_dump())
    assert config.size_multiple == model.size_multiple == expected
    images = torch.randn(1, 3, expected * 2 + 1, expected * 2 - 1)
    assert model.eval()(images).shape[-2:] == images.shape[-2:]
