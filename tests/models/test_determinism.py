"""No op on the training path raises under deterministic mode on CUDA (checked on CPU).

``torch.use_deterministic_algorithms(True)`` makes some CUDA kernels raise; a CPU run never
does, so the training graph of every model variant is walked for their ``grad_fn`` names.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from skinet.metrics.losses import LOSSES, build_loss
from skinet.models.determinism import (
    NONDETERMINISTIC_CUDA_OPS,
    NONDETERMINISTIC_GRAD_FNS,
    TORCH_VERSION,
    find_nondeterministic_ops,
)
from skinet.models.encoder_blocks import ENCODER_BLOCKS
from skinet.models.merge_blocks import MERGE_BLOCKS
from skinet.models.unet2d import UNet2D

COMBOS = list(itertools.product(ENCODER_BLOCKS, MERGE_BLOCKS))
NORMS = ["batch", "instance", "group"]
SIZES = [(16, 16), (19, 17)]  # even; odd (reflect-padded to 20 x 20 inside the model)
TINY: dict[str, Any] = {"out_channels_layer1": 4, "number_of_layers": 3}


def documented_raising_ops() -> set[str]:
    """Op names of the "will throw a RuntimeError" bullets of the installed torch's docs."""
    doc = torch.use_deterministic_algorithms.__doc__ or ""
    section = re.split(r"operations\s+will\s+throw\s+a\s+:class:`RuntimeError`", doc)[1]
    section = section.split("In addition", 1)[0]
    bullets = re.findall(r"^\s*\* :(?:class|func):`([^`]+)`", section, flags=re.MULTILINE)
    return set(bullets)


def test_list_is_the_installed_torch_documentation() -> None:
    documented = documented_raising_ops()
    assert len(documented) > 20, "the documentation's format changed: read it again"
    missing = documented - set(NONDETERMINISTIC_CUDA_OPS)
    assert not missing, (
        f"torch {torch.__version__} documents more raising ops than the list (written for "
        f"torch {TORCH_VERSION}): add {sorted(missing)} to skinet.models.determinism"
    )
    if torch.__version__.split("+")[0] == TORCH_VERSION:
        assert set(NONDETERMINISTIC_CUDA_OPS) == documented


def _pool_indices(pool: Callable[..., tuple[Tensor, Tensor]], x: Tensor) -> tuple[Tensor, Tensor]:
    return pool(x, 2, return_indices=True)


def _x(*shape: int) -> Tensor:
    return torch.randn(*shape, requires_grad=True)


# One CPU call of each documented op that has a grad_fn.
EXAMPLES: dict[str, list[Callable[[], Tensor]]] = {
    "torch.nn.AvgPool3d": [lambda: nn.AvgPool3d(2)(_x(1, 2, 4, 4, 4))],
    "torch.nn.AdaptiveAvgPool2d": [lambda: nn.AdaptiveAvgPool2d(2)(_x(1, 2, 6, 6))],
    "torch.nn.AdaptiveAvgPool3d": [lambda: nn.AdaptiveAvgPool3d(2)(_x(1, 2, 4, 4, 4))],
    "torch.nn.AdaptiveMaxPool2d": [lambda: nn.AdaptiveMaxPool2d(2)(_x(1, 2, 6, 6))],
    "torch.nn.FractionalMaxPool2d": [
        lambda: nn.FractionalMaxPool2d(2, output_size=3)(_x(1, 2, 6, 6))
    ],
    "torch.nn.FractionalMaxPool3d": [
        lambda: nn.FractionalMaxPool3d(2, output_size=2)(_x(1, 2, 4, 4, 4))
    ],
    "torch.nn.MaxUnpool1d": [
        lambda: nn.MaxUnpool1d(2)(*_pool_indices(F.max_pool1d, _x(1, 2, 6)))  # type: ignore[arg-type]
    ],
    "torch.nn.MaxUnpool2d": [
        lambda: nn.MaxUnpool2d(2)(*_pool_indices(F.max_pool2d, _x(1, 2, 6, 6)))  # type: ignore[arg-type]
    ],
    "torch.nn.MaxUnpool3d": [
        lambda: nn.MaxUnpool3d(2)(*_pool_indices(F.max_pool3d, _x(1, 2, 4, 4, 4)))  # type: ignore[arg-type]
    ],
    "torch.nn.functional.interpolate": [
        lambda: F.interpolate(_x(1, 2, 6), scale_factor=2, mode="linear"),
        lambda: F.interpolate(_x(1, 2, 6, 6), scale_factor=2, mode="bilinear"),
        lambda: F.interpolate(_x(1, 2, 6, 6), scale_factor=2, mode="bilinear", antialias=True),
        lambda: F.interpolate(_x(1, 2, 6, 6), scale_factor=2, mode="bicubic"),
        lambda: F.interpolate(_x(1, 2, 6, 6), scale_factor=2, mode="bicubic", antialias=True),
        lambda: F.interpolate(_x(1, 2, 4, 4, 4), scale_factor=2, mode="trilinear"),
    ],
    "torch.nn.ReflectionPad1d": [lambda: nn.ReflectionPad1d(1)(_x(1, 2, 6))],
    "torch.nn.ReflectionPad2d": [lambda: nn.ReflectionPad2d(1)(_x(1, 2, 6, 6))],
    "torch.nn.ReflectionPad3d": [lambda: nn.ReflectionPad3d(1)(_x(1, 2, 4, 4, 4))],
    "torch.nn.NLLLoss": [
        lambda: nn.NLLLoss()(_x(3, 5), torch.tensor([0, 1, 2])),
        lambda: nn.NLLLoss()(_x(2, 3, 4, 4), torch.zeros(2, 4, 4, dtype=torch.long)),
    ],
    "torch.nn.CTCLoss": [
        lambda: nn.CTCLoss()(
            _x(10, 2, 5).log_softmax(2),
            torch.randint(1, 5, (2, 3)),
            torch.tensor([10, 10]),
            torch.tensor([3, 3]),
        )
    ],
    "torch.nn.EmbeddingBag": [
        lambda: nn.EmbeddingBag(10, 3, mode="max")(torch.tensor([[1, 2], [3, 4]]))
    ],
    "torch.Tensor.put_": [lambda: _x(5).clone().put_(torch.tensor([0]), torch.tensor([1.0]))],
    "torch.median": [lambda: torch.median(_x(2, 5), dim=1).values],
    "torch.nn.functional.grid_sample": [
        lambda: F.grid_sample(_x(1, 2, 6, 6), torch.zeros(1, 3, 3, 2), align_corners=False),
        lambda: F.grid_sample(_x(1, 2, 4, 4, 4), torch.zeros(1, 2, 2, 2, 3), align_corners=False),
    ],
    "torch.cumsum": [lambda: torch.cumsum(_x(2, 5), dim=1)],
    "torch.Tensor.scatter_reduce": [
        lambda: torch.zeros(3).scatter_reduce(0, torch.tensor([0, 1, 0]), _x(3), reduce="prod")
    ],
}


@pytest.fixture
def nondeterministic_ops_allowed() -> Iterator[None]:
    """Turn deterministic mode off (Trainer runs leave it on): some examples raise on CPU too."""
    enabled, warn_only = (
        torch.are_deterministic_algorithms_enabled(),
        torch.is_deterministic_algorithms_warn_only_enabled(),
    )
    torch.use_deterministic_algorithms(False)
    yield
    torch.use_deterministic_algorithms(enabled, warn_only=warn_only)


@pytest.mark.usefixtures("nondeterministic_ops_allowed")
@pytest.mark.parametrize("op", sorted(NONDETERMINISTIC_CUDA_OPS))
def test_each_listed_op_leaves_its_grad_fn(op: str) -> None:
    expected = set(NONDETERMINISTIC_CUDA_OPS[op])
    if not expected:
        assert op not in EXAMPLES  # no grad_fn: integer result or in-place resize
        return
    found = set().union(*(find_nondeterministic_ops(make()) for make in EXAMPLES[op]))
    assert found == expected


@pytest.mark.usefixtures("nondeterministic_ops_allowed")
def test_every_listed_grad_fn_is_a_real_class_name() -> None:
    produced = set().union(
        *(find_nondeterministic_ops(make()) for makes in EXAMPLES.values() for make in makes)
    )
    assert produced == NONDETERMINISTIC_GRAD_FNS


def training_loss(model: UNet2D, height: int, width: int, loss_name: str = "BCE_DICE") -> Tensor:
    """A training-mode loss; the images do not require grad, as in training."""
    torch.manual_seed(0)
    images = torch.randn(2, model.in_channels, height, width)
    masks = (torch.rand(2, 1, height, width) > 0.5).float()
    return build_loss(loss_name)(model.train()(images), masks)  # type: ignore[arg-type]


@pytest.mark.parametrize("norm", NORMS)
@pytest.mark.parametrize(("encoder_mode", "merge_mode"), COMBOS)
def test_training_graph_is_deterministic_on_cuda(
    encoder_mode: str, merge_mode: str, norm: str
) -> None:
    # Batch norm through the defaults, so this file also runs against models without `norm`.
    norm_args = {} if norm == "batch" else {"norm": norm, "norm_groups": 2}
    model = UNet2D(
        **TINY, encoder_residual_mode=encoder_mode, merge_residual_mode=merge_mode, **norm_args
    )
    for height, width in SIZES:
        model.zero_grad()
        loss = training_loss(model, height, width)
        found = find_nondeterministic_ops(loss)
        assert not found, f"input {height}x{width}: {sorted(found)} raise in deterministic CUDA"
        loss.backward()
        assert all(p.grad is not None for p in model.parameters())


@pytest.mark.parametrize("loss_name", sorted(LOSSES))
def test_every_loss_is_deterministic_on_cuda(loss_name: str) -> None:
    model = UNet2D(**TINY, merge_residual_mode="attention_gate")
    assert not find_nondeterministic_ops(training_loss(model, 19, 17, loss_name))


def test_legacy_bilinear_gate_is_found() -> None:
    model = UNet2D(**TINY, merge_residual_mode="attention_gate", attention_upsample="bilinear")
    assert find_nondeterministic_ops(training_loss(model, 16, 16)) == {
        "UpsampleBilinear2DBackward0"
    }


def test_reflect_padding_of_an_input_that_requires_grad_is_found() -> None:
    # The model's reflect pad is only on the graph when the input itself requires grad.
    model = UNet2D(**TINY).train()
    logits = model(torch.randn(1, 3, 19, 17, requires_grad=True))
    assert find_nondeterministic_ops(logits) == {"ReflectionPad2DBackward0"}
