"""Training-step speed of each normalisation form, with and without ``channels_last``.

Usage::

    python benchmarks/bench_norm.py                  # cpu_budget.yaml's UNet2D at 128 px
    python benchmarks/bench_norm.py --size 256 --rounds 5

Times a model-only training step (forward, BCE loss, backward, AdamW step) of the UNet2D of
``configs/cpu_budget.yaml`` for every form below, in turns (A B C ... A B C ...) so that a drift of
the machine's speed hits every form alike, and prints images/s (median over rounds) and each
form's ratio to batch norm in its faster memory format. The forms:

- ``batch``: ``nn.BatchNorm2d``;
- ``instance2d``: ``nn.InstanceNorm2d(C, affine=True)``;
- ``groupCC``: ``nn.GroupNorm(C, C)``, the same function (and the same state-dict keys);
- ``instance``: what ``MODEL_CONFIG.norm: instance`` builds (``skinet.models.layers.InstanceNorm``).

Each with ``channels_last`` off and on. Runs on CUDA when available (``--device``), else CPU.
Asserts nothing: ``skinet.models.layers`` records the choice this measures.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from functools import partial

import torch
from torch import nn

from skinet.config.experiment import ExperimentConfig
from skinet.models.layers import InstanceNorm
from skinet.models.unet2d import UNet2D
from skinet.runtime.allocator import reexec_with_malloc_env

FORMS: dict[str, Callable[[int], nn.Module]] = {
    "batch": nn.BatchNorm2d,
    "instance2d": partial(nn.InstanceNorm2d, affine=True),
    "groupCC": lambda channels: nn.GroupNorm(channels, channels),
    "instance": InstanceNorm,
}


def build(form: str, channels_last: bool, device: torch.device) -> nn.Module:
    """The cpu_budget.yaml UNet2D with every norm layer of ``form``."""
    torch.manual_seed(0)
    model = UNet2D(
        out_channels_layer1=16,
        number_of_layers=5,
        encoder_residual_mode="classical",
        merge_residual_mode="attention_gate",
        norm="batch",
    )
    swap_norms(model, FORMS[form])
    model = model.to(device).train()
    if channels_last:
        model = model.to(memory_format=torch.channels_last)  # type: ignore[call-overload]
    return model


def swap_norms(module: nn.Module, factory: Callable[[int], nn.Module]) -> None:
    """Replace every ``BatchNorm2d`` below ``module`` by ``factory(channels)``."""
    for name, child in module.named_children():
        if isinstance(child, nn.BatchNorm2d):
            setattr(module, name, factory(child.num_features))
        else:
            swap_norms(child, factory)


LossStep = Callable[[nn.Module, torch.Tensor, torch.Tensor], torch.Tensor]
"""``(model, images, masks) -> loss``: the forward pass and the loss of one training step."""


def plain_bce(model: nn.Module, images: torch.Tensor, masks: torch.Tensor) -> torch.Tensor:
    return nn.functional.binary_cross_entropy_with_logits(model(images), masks)


def config_loss_step(cfg: ExperimentConfig) -> LossStep:
    """The loss a config trains (``TRAIN_CONFIG.loss_name``, ``bce_weight``, ``dice_reduction``,
    ``MODEL_CONFIG.deep_supervision``), as the Lightning step computes it."""
    from skinet.metrics.losses import DeepSupervisionLoss, build_loss

    train, deep_supervision = cfg.train, cfg.model.deep_supervision
    loss_fn = build_loss(train.loss_name, train.bce_weight, train.dice_reduction)
    if not deep_supervision:
        return lambda model, images, masks: loss_fn(model(images), masks)
    deep_loss = DeepSupervisionLoss(loss_fn, deep_supervision)
    return lambda model, images, masks: deep_loss(model(images, deep=True), masks)


def autocast_bf16(loss_step: LossStep) -> LossStep:
    """``loss_step`` under CPU bfloat16 autocast, as Lightning's ``bf16-mixed`` runs a step."""

    def step(model: nn.Module, images: torch.Tensor, masks: torch.Tensor) -> torch.Tensor:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return loss_step(model, images, masks)

    return step


def step_rate(
    model: nn.Module,
    images: torch.Tensor,
    masks: torch.Tensor,
    steps: int,
    warmup: int,
    loss_step: LossStep = plain_bce,
) -> float:
    """Images/s of ``steps`` training steps after ``warmup`` untimed ones."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)

    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        loss_step(model, images, masks).backward()
        optimizer.step()

    def sync() -> None:
        if images.device.type == "cuda":
            torch.cuda.synchronize()

    for _ in range(warmup):
        step()
    sync()
    start = time.perf_counter()
    for _ in range(steps):
        step()
    sync()
    return steps * images.shape[0] / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, default=128, help="image side (default 128)")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--steps", type=int, default=8, help="timed steps per round")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--forms", nargs="+", default=list(FORMS), choices=list(FORMS))
    args = parser.parse_args()
    device = torch.device(args.device)
    generator = torch.Generator().manual_seed(0)
    images = torch.randn(args.batch_size, 3, args.size, args.size, generator=generator)
    masks = torch.rand(args.batch_size, 1, args.size, args.size, generator=generator) > 0.5
    images, masks = images.to(device), masks.float().to(device)
    print(
        f"device={device} torch={torch.__version__} threads={torch.get_num_threads()} "
        f"size={args.size} batch={args.batch_size} steps={args.steps} rounds={args.rounds}"
    )
    cells = [(form, cl) for form in args.forms for cl in (False, True)]
    rates: dict[tuple[str, bool], list[float]] = {cell: [] for cell in cells}
    for round_index in range(args.rounds):
        for form, channels_last in cells:
            model = build(form, channels_last, device)
            batch = images.contiguous(
                memory_format=torch.channels_last if channels_last else torch.contiguous_format
            )
            rates[(form, channels_last)].append(
                step_rate(model, batch, masks, args.steps, args.warmup)
            )
        print(f"  round {round_index + 1}/{args.rounds} done", flush=True)
    medians = {cell: statistics.median(values) for cell, values in rates.items()}
    batch_best = (
        max(v for (form, _), v in medians.items() if form == "batch")
        if any(form == "batch" for form, _ in cells)
        else None
    )
    print("\n| form | channels_last | images/s (median) | per round | vs batch (best format) |")
    print("|---|---|---:|---|---:|")
    for (form, channels_last), value in medians.items():
        ratio = "" if batch_best is None else f"{value / batch_best:.3f}"
        per_round = ", ".join(f"{v:.1f}" for v in rates[(form, channels_last)])
        print(f"| {form} | {channels_last} | {value:.2f} | {per_round} | {ratio} |")


if __name__ == "__main__":
    reexec_with_malloc_env()
    main()
