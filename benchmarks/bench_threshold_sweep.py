"""Time and peak memory of the streaming threshold sweep vs the broadcast reference.

Usage::

    python benchmarks/bench_threshold_sweep.py                  # 150 images, 256x256, batch 8
    python benchmarks/bench_threshold_sweep.py --device cuda
    python benchmarks/bench_threshold_sweep.py --num-images 300 --size 512

Each method runs in its own fresh subprocess on the same deterministic batches (random
probabilities that also hit every threshold value exactly):

* ``streaming``: :class:`ThresholdSweep` updated batch by batch, as in a validation epoch; a
  batch is generated, counted and dropped, so only one batch is alive at a time.
* ``broadcast``: :func:`find_best_threshold` on the concatenated set, the guide's reference
  definition (it must hold every probability, so the set's tensors count towards its peak).

Peak memory on CPU is the kernel's exact high-water mark of the process's resident set
(``VmHWM``), reset through ``/proc/self/clear_refs`` after imports and a small warm-up, minus
the RSS at that moment; on CUDA it is ``torch.cuda.max_memory_allocated`` minus the memory
allocated before the run. Both include data generation, which is the same work for both
methods. Time covers only the metric calls (update + compute, or the one reference call);
data generation is excluded. Asserts nothing; prints the figures and whether every field of
the two results is identical.
"""

from __future__ import annotations

import argparse
import gc
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from skinet.metrics.thresholds import THRESHOLDS, ThresholdSweep, find_best_threshold


def make_batches(
    num_images: int, size: int, batch_size: int, device: str
) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Deterministic ``(probs, masks)`` batches of shape ``(B, 1, size, size)``."""
    for start in range(0, num_images, batch_size):
        gen = torch.Generator().manual_seed(start)
        b = min(batch_size, num_images - start)
        masks = torch.rand(b, 1, size, size, generator=gen) < 0.3
        probs = (0.45 * masks + 0.6 * torch.rand(b, 1, size, size, generator=gen)).clamp(0, 1)
        probs.view(-1)[: THRESHOLDS.numel()] = THRESHOLDS  # exact threshold values
        yield probs.to(device), masks.to(device)


def read_status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/self/status")


class PeakMemory:
    """Peak memory increase over the moment :meth:`start` is called, in bytes."""

    def __init__(self, device: str) -> None:
        self.device = device

    def start(self) -> None:
        gc.collect()
        if self.device == "cuda":
            torch.cuda.synchronize()
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
            self.base = torch.cuda.memory_allocated()
        else:
            Path("/proc/self/clear_refs").write_text("5")  # reset VmHWM to the current RSS
            self.base = read_status_kib("VmRSS") * 1024

    def peak(self) -> int:
        if self.device == "cuda":
            torch.cuda.synchronize()
            return torch.cuda.max_memory_allocated() - self.base
        return read_status_kib("VmHWM") * 1024 - self.base


def sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def run_method(method: str, num_images: int, size: int, batch_size: int, device: str) -> None:
    """Run one method in this process and print its figures as one JSON line."""
    # Warm-up on one full-size batch, so kernel loading and the intra-op thread pool (whose
    # stacks count in RSS) are not measured.
    warm = next(make_batches(batch_size, size, batch_size, device))
    metric = ThresholdSweep().to(device)
    metric.update(*warm)
    metric.compute()
    find_best_threshold(*warm)
    del warm, metric

    memory = PeakMemory(device)
    memory.start()
    elapsed = 0.0
    if method == "streaming":
        metric = ThresholdSweep().to(device)
        for probs, masks in make_batches(num_images, size, batch_size, device):
            sync(device)
            t0 = time.perf_counter()
            metric.update(probs, masks)
            sync(device)
            elapsed += time.perf_counter() - t0
            del probs, masks
        t0 = time.perf_counter()
        result = metric.compute()
        sync(device)
        elapsed += time.perf_counter() - t0
    else:
        batches = list(make_batches(num_images, size, batch_size, device))
        probs = torch.cat([p for p, _ in batches])
        masks = torch.cat([m for _, m in batches])
        del batches
        sync(device)
        t0 = time.perf_counter()
        result = find_best_threshold(probs, masks)
        sync(device)
        elapsed = time.perf_counter() - t0
    peak = memory.peak()
    fields: dict[str, Any] = {k: v.cpu().tolist() for k, v in vars(result).items()}
    print(json.dumps({"method": method, "seconds": elapsed, "peak_bytes": peak, **fields}))


def run_in_subprocess(method: str, args: argparse.Namespace) -> dict[str, Any]:
    cmd = [
        sys.executable,
        __file__,
        "--method",
        method,
        "--num-images",
        str(args.num_images),
        "--size",
        str(args.size),
        "--batch-size",
        str(args.batch_size),
        "--device",
        args.device,
    ]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-images", type=int, default=150)
    parser.add_argument("--size", type=int, default=256)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--method", choices=["streaming", "broadcast"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.method:
        run_method(args.method, args.num_images, args.size, args.batch_size, args.device)
        return

    pixels = args.num_images * args.size * args.size
    print(
        f"{args.num_images} images {args.size}x{args.size}, batch {args.batch_size}, "
        f"{THRESHOLDS.numel()} thresholds, device {args.device}, torch {torch.__version__}"
    )
    results = {m: run_in_subprocess(m, args) for m in ("streaming", "broadcast")}
    print(f"{'method':<10} {'time (s)':>9} {'peak (MiB)':>11}")
    for name, r in results.items():
        print(f"{name:<10} {r['seconds']:>9.3f} {r['peak_bytes'] / 2**20:>11.1f}")
    stream, ref = results["streaming"], results["broadcast"]
    print(f"memory ratio broadcast/streaming: {ref['peak_bytes'] / stream['peak_bytes']:.1f}x")
    print(f"speed ratio broadcast/streaming: {ref['seconds'] / stream['seconds']:.1f}x")
    print(
        f"for scale: the whole set's float32 probs are {pixels * 4 / 2**20:.1f} MiB and the "
        f"reference's (T, N, H*W) bool preds {pixels * THRESHOLDS.numel() / 2**20:.1f} MiB; "
        "its summing them casts to int64 (8x that) on CPU"
    )
    keys = [k for k in stream if k not in ("method", "seconds", "peak_bytes")]
    different = [k for k in keys if stream[k] != ref[k]]
    print(f"identical results: {not different}" + (f" (differ: {different})" if different else ""))
    print(
        f"best_dice {stream['best_dice']:.6f} at threshold {stream['optimal_threshold']:.2f}, "
        f"dice@0.5 {stream['dice_at_05']:.6f}, "
        f"mean per-image dice {stream['mean_dice_per_image']:.6f}"
    )


if __name__ == "__main__":
    main()
