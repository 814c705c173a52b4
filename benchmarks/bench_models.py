"""Forward+backward throughput and peak memory of every UNet2D mode combination.

Usage::

    python benchmarks/bench_models.py                       # all 20 combos, eager
    python benchmarks/bench_models.py --compile --steps 20  # eager and torch.compile
    python benchmarks/bench_models.py --combos classical:attention_gate he2:he2

Runs on CUDA when available, else CPU. Prints a table; asserts nothing. Peak memory is
``torch.cuda.max_memory_allocated`` on GPU and the peak RSS increase over the pre-step RSS
(sampled every millisecond) on CPU.
"""

from __future__ import annotations

import argparse
import itertools
import os
import sys
import threading
import time
from dataclasses import dataclass

import psutil
import torch
from torch import nn

from skinet.checkpoints.state_dict import compile_model, count_parameters
from skinet.models.encoder_blocks import ENCODER_BLOCKS
from skinet.models.merge_blocks import MERGE_BLOCKS
from skinet.models.unet2d import UNet2D
from skinet.runtime.allocator import reexec_with_malloc_env


@dataclass
class Result:
    combo: str
    mode: str
    params: int
    images_per_sec: float
    peak_mib: float


class RssPeakSampler:
    """Record the peak RSS increase of this process while the context is open."""

    def __init__(self, interval_s: float = 0.001) -> None:
        self.interval_s = interval_s
        self.process = psutil.Process()
        self.peak_delta = 0
        self._stop = threading.Event()

    def __enter__(self) -> RssPeakSampler:
        self.baseline = self.process.memory_info().rss
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _sample(self) -> None:
        while not self._stop.is_set():
            delta = self.process.memory_info().rss - self.baseline
            self.peak_delta = max(self.peak_delta, delta)
            time.sleep(self.interval_s)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--combos", nargs="+", metavar="ENC:MERGE", help="default: all 20")
    parser.add_argument("--compile", action="store_true", help="also time torch.compile")
    parser.add_argument("--backend", default="inductor", help="torch.compile backend")
    parser.add_argument("--steps", type=int, default=10, help="timed steps per run")
    parser.add_argument("--warmup", type=int, default=2, help="untimed steps (compiles here)")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--size", type=int, default=256)
    parser.add_argument("--channels-last", action="store_true")
    return parser.parse_args()


def resolve_combos(names: list[str] | None) -> list[tuple[str, str]]:
    if not names:
        return list(itertools.product(ENCODER_BLOCKS, MERGE_BLOCKS))
    combos = []
    for name in names:
        encoder_mode, _, merge_mode = name.partition(":")
        if encoder_mode not in ENCODER_BLOCKS or merge_mode not in MERGE_BLOCKS:
            raise SystemExit(
                f"--combos: {name!r} is not ENC:MERGE with ENC in {sorted(ENCODER_BLOCKS)} "
                f"and MERGE in {sorted(MERGE_BLOCKS)}"
            )
        combos.append((encoder_mode, merge_mode))
    return combos


def time_steps(
    model: nn.Module, images: torch.Tensor, steps: int, warmup: int, device: torch.device
) -> tuple[float, float]:
    """Return (images/s, peak MiB) of ``steps`` forward+backward passes after ``warmup``."""

    def step() -> None:
        model.zero_grad(set_to_none=True)
        model(images).float().square().mean().backward()

    for _ in range(warmup):
        step()
    if device.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        start = time.perf_counter()
        for _ in range(steps):
            step()
        torch.cuda.synchronize()
        elapsed = time.perf_counter() - start
        peak = torch.cuda.max_memory_allocated()
    else:
        with RssPeakSampler() as sampler:
            start = time.perf_counter()
            for _ in range(steps):
                step()
            elapsed = time.perf_counter() - start
        peak = sampler.peak_delta
    return steps * images.shape[0] / elapsed, peak / 2**20


def main() -> None:
    args = parse_args()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    memory_format = torch.channels_last if args.channels_last else torch.contiguous_format
    images = torch.randn(args.batch_size, 3, args.size, args.size, device=device)
    images = images.contiguous(memory_format=memory_format)
    modes = ["eager", f"compile[{args.backend}]"] if args.compile else ["eager"]
    print(
        f"device={device} torch={torch.__version__} threads={torch.get_num_threads()} "
        f"batch={args.batch_size} size={args.size} steps={args.steps} warmup={args.warmup} "
        f"channels_last={args.channels_last} MALLOC_MMAP_MAX_={os.environ.get('MALLOC_MMAP_MAX_')}"
    )
    results = []
    for encoder_mode, merge_mode in resolve_combos(args.combos):
        for mode in modes:
            torch.manual_seed(0)
            model = UNet2D(encoder_residual_mode=encoder_mode, merge_residual_mode=merge_mode)
            model = model.to(device, memory_format=memory_format).train()
            params = count_parameters(model)
            if mode != "eager":
                torch._dynamo.reset()
                model = compile_model(model, args.backend)
            images_per_sec, peak_mib = time_steps(model, images, args.steps, args.warmup, device)
            results.append(
                Result(f"{encoder_mode}:{merge_mode}", mode, params, images_per_sec, peak_mib)
            )
            print(f"  done {results[-1].combo} {mode}", file=sys.stderr, flush=True)
    memory_label = "peak alloc MiB" if device.type == "cuda" else "peak RSS delta MiB"
    print(f"\n| combo | mode | params | images/s | {memory_label} |")
    print("|---|---|---:|---:|---:|")
    for r in results:
        print(
            f"| {r.combo} | {r.mode} | {r.params:,} | {r.images_per_sec:.2f} | {r.peak_mib:.0f} |"
        )


if __name__ == "__main__":
    reexec_with_malloc_env()
    main()
