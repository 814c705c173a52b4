"""Autograd ops that raise under ``torch.use_deterministic_algorithms(True)`` on CUDA.

Lightning's ``Trainer(deterministic=True)`` (``TRAIN_CONFIG.deterministic: true``) calls
``torch.use_deterministic_algorithms(True)``. On CUDA the ops below then raise ``RuntimeError``
in their forward or backward; on CPU none of them raises, so a CPU run never shows it. Each op
leaves a known ``grad_fn`` in the autograd graph, so walking the graph of a CPU loss with
:func:`find_nondeterministic_ops` finds every one that a CUDA run would hit.

The list is the "will throw a RuntimeError when mode=True" section of
``torch.use_deterministic_algorithms.__doc__`` in torch :data:`TORCH_VERSION`, keyed by the name
the documentation gives; the values are the ``grad_fn`` class names each op produces (checked
by building every op on CPU in ``tests/models/test_determinism.py``). Entries with no names
produce no ``grad_fn`` (integer results or in-place resizes) and cannot be seen in a graph.
"""

from __future__ import annotations

from torch import Tensor

TORCH_VERSION = "2.13.0"
"""torch version whose ``use_deterministic_algorithms`` documentation this list copies."""

NONDETERMINISTIC_CUDA_OPS: dict[str, tuple[str, ...]] = {
    "torch.nn.AvgPool3d": ("AvgPool3DBackward0",),
    # AdaptiveAvgPool2d(1) runs as a mean (MeanBackward1), which is deterministic.
    "torch.nn.AdaptiveAvgPool2d": ("AdaptiveAvgPool2DBackward0",),
    "torch.nn.AdaptiveAvgPool3d": ("AdaptiveAvgPool3DBackward0",),
    "torch.nn.AdaptiveMaxPool2d": ("AdaptiveMaxPool2DBackward0",),
    "torch.nn.FractionalMaxPool2d": ("FractionalMaxPool2DBackward0",),
    "torch.nn.FractionalMaxPool3d": ("FractionalMaxPool3DBackward0",),
    "torch.nn.MaxUnpool1d": ("MaxUnpool2DBackward0",),  # computed by max_unpool2d
    "torch.nn.MaxUnpool2d": ("MaxUnpool2DBackward0",),
    "torch.nn.MaxUnpool3d": ("MaxUnpool3DBackward0",),
    # linear, bilinear, bicubic and trilinear modes (with and without antialias).
    "torch.nn.functional.interpolate": (
        "UpsampleLinear1DBackward0",
        "UpsampleBilinear2DBackward0",
        "UpsampleBilinear2DAaBackward0",
        "UpsampleBicubic2DBackward0",
        "UpsampleBicubic2DAaBackward0",
        "UpsampleTrilinear3DBackward0",
    ),
    "torch.nn.ReflectionPad1d": ("ReflectionPad1DBackward0",),
    "torch.nn.ReflectionPad2d": ("ReflectionPad2DBackward0",),
    "torch.nn.ReflectionPad3d": ("ReflectionPad3DBackward0",),
    "torch.nn.NLLLoss": ("NllLossBackward0", "NllLoss2DBackward0"),
    "torch.nn.CTCLoss": ("CtcLossBackward0",),
    "torch.nn.EmbeddingBag": ("EmbeddingBagBackward0",),  # mode="max" only; listed whole
    "torch.Tensor.put_": ("PutBackward0",),
    "torch.histc": (),
    "torch.bincount": (),
    "torch.median": ("MedianBackward1",),  # the variant that returns indices
    "torch.nn.functional.grid_sample": ("GridSampler2DBackward0", "GridSampler3DBackward0"),
    "torch.cumsum": ("CumsumBackward0",),
    "torch.Tensor.scatter_reduce": ("ScatterReduceBackward0",),  # reduce="prod"; listed whole
    "torch.Tensor.resize_": (),
}
"""Documented op -> the ``grad_fn`` class names it leaves in the autograd graph."""

NONDETERMINISTIC_GRAD_FNS: frozenset[str] = frozenset(
    name for names in NONDETERMINISTIC_CUDA_OPS.values() for name in names
)
"""Every ``grad_fn`` class name of :data:`NONDETERMINISTIC_CUDA_OPS`."""


def find_nondeterministic_ops(output: Tensor) -> set[str]:
    """The ``grad_fn`` names in ``output``'s autograd graph that raise in deterministic CUDA mode.

    Walks the whole graph from ``output.grad_fn`` (e.g. a training loss) to the leaves.
    An empty set means backward from ``output`` calls none of :data:`NONDETERMINISTIC_GRAD_FNS`.
    """
    found: set[str] = set()
    seen: set[int] = set()
    stack = [output.grad_fn]
    while stack:
        node = stack.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        if type(node).__name__ in NONDETERMINISTIC_GRAD_FNS:
            found.add(type(node).__name__)
        stack.extend(next_node for next_node, _ in node.next_functions)
    return found
