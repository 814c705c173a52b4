"""DataLoader throughput and worker memory at 256x256 with the default augmentations.

Measures training-loader images/s for ``num_workers`` 0, 1, 2 with the RAM cache on and off,
and the summed RSS / USS of the worker processes after each of ``--epochs`` epochs (flat USS
means no copy-on-write growth). Then compares the goal configuration (cache on, 2 workers)
with the training speed of the default ``UNet2D`` when that model is importable.

    python benchmarks/bench_dataloader.py            # ~2-4 minutes on 2 cores
    python benchmarks/bench_dataloader.py --quick    # smaller, for a smoke run

The script re-executes itself with ``MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=2147483647``:
glibc otherwise returns freed blocks to the system and page-faults them back, which dominates
CPU timings (see docs/development.md).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

from skinet.runtime.allocator import reexec_with_malloc_env


def _worker_memory_mb() -> tuple[float, float]:
    """Summed RSS and USS (private pages) of this process's children, in MB."""
    import psutil

    rss = uss = 0
    for child in psutil.Process().children(recursive=True):
        try:
            info = child.memory_full_info()
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        rss += info.rss
        uss += getattr(info, "uss", 0)
    return rss / 2**20, uss / 2**20


def bench_loader(cfg, epochs: int) -> tuple[float, list[tuple[float, float]], float]:
    """Images/s over epochs 2.. (epoch 1 pays worker start-up), memory per epoch, cache MB."""
    from skinet.training.data.loaders import build_dataloaders

    loaders = build_dataloaders(cfg)
    loader = loaders.train
    memory = []
    images = 0
    elapsed = 0.0
    for epoch in range(epochs):
        start = time.perf_counter()
        count = sum(batch[0].shape[0] for batch in loader)
        if epoch > 0 or epochs == 1:
            elapsed += time.perf_counter() - start
            images += count
        memory.append(_worker_memory_mb())
    cache_mb = (
        sum(d.cache_nbytes for d in (loaders.train_dataset, loaders.val_dataset) if d is not None)
        / 2**20
    )
    del loaders, loader  # stops the persistent workers
    return images / elapsed, memory, cache_mb


def bench_model(cfg, steps: int, device: str = "cpu") -> float | None:
    """Training images/s of the config's UNet2D (forward, BCE, backward, AdamW step) on ``device``.

    On CUDA, ``16-mixed``/``bf16-mixed`` in ``TRAIN_CONFIG.precision`` run under autocast and
    ``channels_last`` follows the config, as in training; the clock waits for the GPU.
    """
    try:
        from skinet.models.unet2d import UNet2D
    except ImportError:
        return None
    import torch

    torch.manual_seed(0)
    target = torch.device(device)
    memory_format = torch.channels_last if cfg.train.channels_last else torch.contiguous_format
    model = UNet2D(**cfg.model.model_dump()).to(target, memory_format=memory_format).train()
    optimiser = torch.optim.AdamW(model.parameters(), lr=1e-4)
    batch = cfg.train.batch_size
    size = cfg.data.image_size
    images = torch.randn(batch, 3, size, size, device=target).contiguous(
        memory_format=memory_format
    )
    masks = (torch.rand(batch, 1, size, size, device=target) > 0.5).float()
    loss_fn = torch.nn.BCEWithLogitsLoss()
    dtypes = {"16-mixed": torch.float16, "bf16-mixed": torch.bfloat16}
    autocast_dtype = dtypes.get(cfg.train.precision) if target.type == "cuda" else None

    def sync() -> None:
        if target.type == "cuda":
            torch.cuda.synchronize(target)

    elapsed = 0.0
    for step in range(steps + 2):
        sync()
        start = time.perf_counter()
        optimiser.zero_grad(set_to_none=True)
        with torch.autocast(target.type, dtype=autocast_dtype, enabled=autocast_dtype is not None):
            logits = model(images)
        loss_fn(logits.float(), masks).backward()
        optimiser.step()
        sync()
        if step >= 2:  # warm-up steps excluded
            elapsed += time.perf_counter() - start
    return steps * batch / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--num-train", type=int, default=160)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--image-size", type=int, default=256)
    parser.add_argument("--workers", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--model-steps", type=int, default=6)
    parser.add_argument("--quick", action="store_true", help="64 images, 3 epochs, 3 model steps")
    args = parser.parse_args()
    if args.quick:
        args.num_train, args.epochs, args.model_steps = 64, 3, 3
    reexec_with_malloc_env()

    import torch

    from skinet.config.experiment import parse_config

    torch.set_num_threads(max(1, os.cpu_count() or 1))
    data_root = Path(tempfile.mkdtemp(prefix="bench_dataloader_"))

    def config(cache: bool, workers: int):
        return parse_config(
            {
                "TRAIN_CONFIG": {
                    "accelerator": "cpu",
                    "batch_size": args.batch_size,
                    "num_workers": workers,
                    "cache_in_ram": cache,
                },
                "DATA_CONFIG": {
                    "dataset": "synthetic",
                    "data_dir": str(data_root),
                    "image_size": args.image_size,
                    "synthetic_num_train": args.num_train,
                    "synthetic_num_val": 8,
                    "synthetic_num_test": 8,
                    "synthetic_image_size": args.image_size,
                },
            }
        )

    start = time.perf_counter()
    from skinet.datasets.locate import resolve_root

    resolve_root(config(True, 0))
    print(
        f"generated {args.num_train + 16} synthetic {args.image_size}px images in "
        f"{time.perf_counter() - start:.1f} s; {os.cpu_count()} CPUs; "
        f"batch {args.batch_size}; {args.epochs} epochs"
    )
    print(f"{'cache':>5} {'workers':>7} {'images/s':>9}  worker RSS / USS MB per epoch")
    results = {}
    for cache in (True, False):
        for workers in args.workers:
            speed, memory, cache_mb = bench_loader(config(cache, workers), args.epochs)
            results[cache, workers] = speed
            per_epoch = " ".join(f"{rss:.0f}/{uss:.0f}" for rss, uss in memory)
            note = f"  (cache {cache_mb:.0f} MB)" if cache and workers == args.workers[0] else ""
            print(f"{'on' if cache else 'off':>5} {workers:>7} {speed:>9.1f}  {per_epoch}{note}")

    goal = results.get((True, 2))
    model_speed = bench_model(config(True, 0), args.model_steps)
    if model_speed is None:
        print("skinet.models.unet2d.UNet2D not importable: model comparison skipped")
    elif goal is not None:
        verdict = "keeps up with" if goal >= model_speed else "is SLOWER than"
        print(
            f"goal: loader (cache on, 2 workers) {goal:.1f} images/s {verdict} "
            f"default UNet2D training {model_speed:.1f} images/s (ratio {goal / model_speed:.1f}x)"
        )


if __name__ == "__main__":
    main()
