"""Cost per image of each training augmentation, against the model's training step.

Usage::

    python benchmarks/bench_augment.py                                   # configs/cpu_budget.yaml
    python benchmarks/bench_augment.py --config configs/cpu_budget.yaml \\
        --transforms configs/transforms_robust.yaml                      # another TRANSFORM_CONFIG

Each transform of ``TRANSFORM_CONFIG.train_transforms`` is applied on its own (with ``p: 1``, so
the cost of the work itself is timed, then weighted by its ``p``) to ``--images`` synthetic
lesion images at ``DATA_CONFIG.image_size``, as the RAM cache hands them to the pipeline. The
whole pipeline (its real ``p`` values) is timed the same way. Beside it, in the same run, a
model-only training step of the config's UNet2D (its ``channels_last`` as resolved for the CPU)
gives the images/s the model consumes. The ratio "pipeline / model images/s" is the headroom
of one loader process: above 1, one worker keeps the model fed; ``num_workers`` processes share
the same cores as the model on a CPU-only machine, so below about 2 on 2 cores the loader starts
to show in the step time. Asserts nothing.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch
import yaml

from skinet.config.experiment import load_config
from skinet.runtime.allocator import reexec_with_malloc_env

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_norm import step_rate  # noqa: E402

Pairs = list[tuple[np.ndarray, np.ndarray]]


def synthetic_images(count: int, size: int) -> Pairs:
    """Images and masks as the cache holds them: uint8 RGB ``(size, size, 3)``, ``(size, size)``."""
    from skinet.datasets.synthetic import make_synthetic_sample

    pairs = []
    for index in range(count):
        image, mask = make_synthetic_sample(np.random.default_rng(index), size)
        pairs.append((np.ascontiguousarray(image[..., ::-1]), (mask > 0).astype(np.uint8)))
    return pairs


def per_image_ms(
    transform: object, pairs: list[tuple[np.ndarray, np.ndarray]], repeats: int
) -> float:
    """Median over ``repeats`` passes of the milliseconds per image of ``transform``."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        for image, mask in pairs:
            transform(image=image, mask=mask)  # type: ignore[operator]
        times.append((time.perf_counter() - start) * 1000 / len(pairs))
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", type=Path, default=REPO / "configs" / "cpu_budget.yaml")
    parser.add_argument(
        "--transforms", type=Path, help="a YAML file whose TRANSFORM_CONFIG to time"
    )
    parser.add_argument("--images", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--model-steps", type=int, default=6)
    args = parser.parse_args()
    torch.set_num_threads(torch.get_num_threads())
    overrides = {}
    if args.transforms is not None:
        section = yaml.safe_load(args.transforms.read_text())["TRANSFORM_CONFIG"]
        overrides = {f"TRANSFORM_CONFIG.{key}": value for key, value in section.items()}
    cfg = load_config(args.config, overrides)
    size = cfg.data.image_size

    import albumentations as A

    from skinet.augment.cpu import build_train_transform, resolve_transform_class
    from skinet.models.layers import uses_channels_last
    from skinet.models.unet2d import UNet2D

    pairs = synthetic_images(args.images, size)
    print(
        f"config={args.config.name} transforms={args.transforms or 'the config'} size={size} "
        f"images={args.images} threads={torch.get_num_threads()}"
    )
    rows = []
    for spec in cfg.transform.train_transforms:
        params = {**spec.params, "p": 1.0}
        transform = A.Compose([resolve_transform_class(spec.name)(**params)], seed=0)  # type: ignore[misc]
        cost = per_image_ms(transform, pairs, args.repeats)
        rows.append((spec.name, float(spec.params.get("p", 1.0)), cost))
    pipeline = per_image_ms(build_train_transform(cfg), pairs, args.repeats)

    model = UNet2D(**cfg.model.model_dump()).train()
    channels_last = uses_channels_last(cfg.train.channels_last, cfg.model.norm, "cpu")
    memory_format = torch.channels_last if channels_last else torch.contiguous_format
    model = model.to(memory_format=memory_format)  # type: ignore[call-overload]
    batch = cfg.train.batch_size
    images = torch.randn(batch, 3, size, size).contiguous(memory_format=memory_format)
    masks = (torch.rand(batch, 1, size, size) > 0.5).float()
    model_rate = step_rate(model, images, masks, args.model_steps, 2)

    print("\n| transform | p | ms/image when applied | expected ms/image (x p) |")
    print("|---|---:|---:|---:|")
    for name, p, cost in rows:
        print(f"| {name} | {p:g} | {cost:.3f} | {cost * p:.3f} |")
    expected = sum(cost * p for _, p, cost in rows)
    print(f"| sum | | | {expected:.3f} |")
    loader_rate = 1000 / pipeline
    print(
        f"\nwhole pipeline: {pipeline:.3f} ms/image = {loader_rate:.0f} images/s in one process; "
        f"model-only training step ({'channels_last' if channels_last else 'contiguous'}): "
        f"{model_rate:.1f} images/s; pipeline / model = {loader_rate / model_rate:.1f}x"
    )


if __name__ == "__main__":
    reexec_with_malloc_env()
    main()
