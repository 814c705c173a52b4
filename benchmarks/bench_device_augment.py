"""Training-batch images/s of ``augment_on: device`` against the worker pipeline, one run.

Both paths make the same batches of the robust recipe (``configs/transforms_robust.yaml``) at
256 px from the same RAM-cached synthetic split: the worker pipeline is the training
``RepeatDataLoader`` (albumentations in ``--workers`` processes, then normalisation and
collation); the device path is the index loader of ``augment_on: device`` with each batch
gathered, augmented and normalised by
:class:`~skinet.training.data.device_split.DeviceResidentSplit`
on ``--device`` (CPU tensors by default; ``cuda`` on a GPU machine, where the default
``UNet2D``'s training images/s is printed beside them, as in ``bench_dataloader.py``).

    python benchmarks/bench_device_augment.py                 # 512 images, 3 epochs
    python benchmarks/bench_device_augment.py --quick         # 32 images, 2 epochs (a smoke run)
    python benchmarks/bench_device_augment.py --device cuda   # on a GPU

The first epoch of each path is a warm-up and is not timed. The script re-executes itself with
``MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=2147483647`` (see docs/development.md).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_dataloader import bench_model  # noqa: E402

from skinet.runtime.allocator import reexec_with_malloc_env  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


def time_worker_pipeline(cfg, epochs: int) -> float:
    """Images/s of the training ``RepeatDataLoader`` over epochs 2.. (epoch 1 starts workers)."""
    from skinet.training.data.loaders import build_dataloaders

    loader = build_dataloaders(cfg, world_size=1).train
    images, elapsed = 0, 0.0
    for epoch in range(epochs):
        start = time.perf_counter()
        count = sum(batch[0].shape[0] for batch in loader)
        if epoch > 0:
            elapsed += time.perf_counter() - start
            images += count
    del loader  # stops the persistent workers
    return images / elapsed


def time_device_path(cfg, epochs: int, device: str) -> float:
    """Images/s of index batches turned into augmented batches on ``device``, epochs 2.."""
    import torch

    from skinet.training.data.device_split import find_device_split
    from skinet.training.data.loaders import build_dataloaders

    loader = build_dataloaders(cfg, world_size=1).train
    split = find_device_split(loader)
    assert split is not None  # augment_on: device builds an index loader
    split.to(device)

    def sync() -> None:
        if torch.device(device).type == "cuda":
            torch.cuda.synchronize()

    images, elapsed = 0, 0.0
    for epoch in range(epochs):
        sync()
        start = time.perf_counter()
        count = 0
        for indices in loader:
            batch_images, _ = split.make_batch(indices.to(device), epoch)
            count += batch_images.shape[0]
        sync()
        if epoch > 0:
            elapsed += time.perf_counter() - start
            images += count
    split.release()
    return images / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-train", type=int, default=512)
    parser.add_argument("--image-size", type=int, default=256)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--epochs", type=int, default=3, help="timed epochs + 1 warm-up")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--device", default="cpu", help="device of the device path (cpu, cuda)")
    parser.add_argument("--model-steps", type=int, default=6, help="UNet2D steps (cuda only)")
    parser.add_argument(
        "--threads",
        type=int,
        default=os.cpu_count() or 1,
        help="torch intra-op threads of the device path on CPU (1 is faster on a busy machine)",
    )
    parser.add_argument("--quick", action="store_true", help="32 images, 2 epochs, batch 8")
    args = parser.parse_args()
    if args.quick:
        args.num_train, args.epochs, args.batch_size = 32, 2, 8
    reexec_with_malloc_env()

    import torch

    from skinet.config.experiment import parse_config
    from skinet.datasets.locate import resolve_root

    torch.set_num_threads(max(1, args.threads))
    data_root = Path(tempfile.mkdtemp(prefix="bench_device_augment_"))
    recipe = yaml.safe_load((REPO / "configs" / "transforms_robust.yaml").read_text())

    def config(augment_on: str, workers: int):
        return parse_config(
            {
                "TRAIN_CONFIG": {
                    "accelerator": "gpu" if args.device.startswith("cuda") else "cpu",
                    "batch_size": args.batch_size,
                    "num_workers": workers,
                    "augment_on": augment_on,
                },
                "DATA_CONFIG": {
                    "dataset": "synthetic",
                    "data_dir": str(data_root),
                    "image_size": args.image_size,
                    "synthetic_num_train": args.num_train,
                    "synthetic_num_val": 2,
                    "synthetic_num_test": 2,
                    "synthetic_image_size": args.image_size,
                },
                "TRANSFORM_CONFIG": recipe["TRANSFORM_CONFIG"],
            }
        )

    start = time.perf_counter()
    resolve_root(config("cpu", 0))
    print(
        f"generated {args.num_train} synthetic {args.image_size}px images in "
        f"{time.perf_counter() - start:.1f} s; {os.cpu_count()} CPUs; batch {args.batch_size}; "
        f"{args.epochs - 1} timed epochs; {torch.get_num_threads()} torch threads; robust recipe"
    )
    workers = time_worker_pipeline(config("cpu", args.workers), args.epochs)
    print(f"worker pipeline ({args.workers} workers, albumentations): {workers:8.1f} images/s")
    device = time_device_path(config("device", 0), args.epochs, args.device)
    print(f"device path (augment_on: device, on {args.device}):   {device:8.1f} images/s")
    print(f"ratio device / workers: {device / workers:.2f}x")
    if args.device.startswith("cuda"):
        model = bench_model(config("device", 0), args.model_steps, args.device)
        if model is not None:
            print(
                f"default UNet2D training on {args.device}: {model:.1f} images/s; device path / "
                f"model {device / model:.1f}x, workers / model {workers / model:.1f}x"
            )


if __name__ == "__main__":
    main()
