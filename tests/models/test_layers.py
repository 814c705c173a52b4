"""MODEL_CONFIG.norm: instance: one function in every kernel and memory format, one state dict."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from torch import nn

from skinet.models.layers import InstanceNorm, uses_channels_last
from skinet.models.unet2d import UNet2D

TINY = {"out_channels_layer1": 4, "number_of_layers": 3, "merge_residual_mode": "attention_gate"}


def _swap_norms(module: nn.Module, factory: Callable[[int], nn.Module]) -> None:
    for name, child in module.named_children():
        if isinstance(child, InstanceNorm):
            setattr(module, name, factory(child.num_channels))
        else:
            _swap_norms(child, factory)


def _reference_unet() -> UNet2D:
    """The same UNet2D with torch's own ``nn.InstanceNorm2d(C, affine=True)`` layers."""
    model = UNet2D(**TINY, norm="instance")
    _swap_norms(model, lambda channels: nn.InstanceNorm2d(channels, affine=True))
    return model


@pytest.mark.parametrize("channels_last", [False, True])
def test_instance_norm_equals_torch_instance_norm_forward_and_backward(channels_last: bool) -> None:
    torch.manual_seed(0)
    norm, reference = InstanceNorm(6), nn.InstanceNorm2d(6, affine=True)
    nn.init.uniform_(norm.weight)
    nn.init.uniform_(norm.bias)
    reference.load_state_dict(norm.state_dict())
    images = torch.randn(3, 6, 9, 7) * 3 + 1
    memory_format = torch.channels_last if channels_last else torch.contiguous_format
    x = images.clone().contiguous(memory_format=memory_format).requires_grad_()
    x_ref = images.clone().requires_grad_()
    out = norm(x)
    assert out.is_contiguous(memory_format=memory_format)
    torch.testing.assert_close(out, reference(x_ref), rtol=1e-5, atol=1e-5)
    grad = torch.randn_like(out)
    out.backward(grad)
    reference(x_ref).backward(grad)
    torch.testing.assert_close(x.grad, x_ref.grad, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(norm.weight.grad, reference.weight.grad, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(norm.bias.grad, reference.bias.grad, rtol=1e-4, atol=1e-4)


def test_one_pixel_per_channel_still_normalises() -> None:
    # batch_norm refuses a single value per channel; that case takes the group_norm kernel.
    norm = InstanceNorm(4)
    x = torch.randn(2, 4, 1, 1).contiguous(memory_format=torch.channels_last)
    expected = torch.zeros_like(x) + norm.bias.view(1, -1, 1, 1)
    torch.testing.assert_close(norm(x), expected, rtol=0, atol=1e-4)


@pytest.mark.parametrize("channels_last", [False, True])
def test_state_dicts_load_either_way_with_equal_outputs(channels_last: bool) -> None:
    torch.manual_seed(0)
    ours = UNet2D(**TINY, norm="instance")
    for module in ours.modules():
        if isinstance(module, InstanceNorm):
            nn.init.uniform_(module.weight, 0.5, 1.5)
            nn.init.uniform_(module.bias, -0.2, 0.2)
    reference = _reference_unet()
    assert ours.state_dict().keys() == reference.state_dict().keys()
    reference.load_state_dict(ours.state_dict(), strict=True)  # ours -> torch's
    back = UNet2D(**TINY, norm="instance")
    back.load_state_dict(reference.state_dict(), strict=True)  # torch's -> ours
    images = torch.randn(2, 3, 24, 20)
    with torch.no_grad():
        expected = reference.eval()(images)
        if channels_last:
            back = back.to(memory_format=torch.channels_last)  # type: ignore[call-overload]
            images = images.contiguous(memory_format=torch.channels_last)
        actual = back.eval()(images)
    torch.testing.assert_close(actual, expected, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(
    ("setting", "norm", "device", "expected"),
    [
        (None, "instance", "cpu", True),
        (None, "batch", "cpu", True),
        (None, "group", "cpu", False),
        (None, "instance", "mps", False),
        (None, "instance", "cuda", False),  # not measured there: one group_norm kernel per layer
        (None, "batch", "cuda", True),
        (False, "instance", "cpu", False),
        (True, "group", "cpu", True),
    ],
)
def test_channels_last_default_follows_norm_and_device(
    setting: bool | None, norm: str, device: str, expected: bool
) -> None:
    assert uses_channels_last(setting, norm, device) is expected


def test_both_forms_of_instance_norm_agree_under_autocast() -> None:
    torch.manual_seed(0)
    norm, conv = InstanceNorm(8), torch.nn.Conv2d(8, 8, 3, padding=1)
    x = torch.randn(2, 8, 16, 16)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        features = conv(x)
        contiguous = norm(features.contiguous())
        channels_last = norm(features.contiguous(memory_format=torch.channels_last))
    assert contiguous.dtype == channels_last.dtype == features.dtype
    torch.testing.assert_close(contiguous.float(), channels_last.float(), rtol=2e-2, atol=2e-2)
