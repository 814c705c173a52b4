"""End-to-end prediction throughput: images/s for 512x512 RGB inputs, eager and exported.

Usage::

    python benchmarks/bench_predict.py                          # default model, random weights
    python benchmarks/bench_predict.py --checkpoint best.ckpt --num-images 64 --batch-size 16

With ``--input-dir DIR`` (a folder of real JPEGs, e.g. ISIC 2017 validation images) it instead
times ``skinet predict`` end to end on those files (decode, predict, write masks), serial
(``--io-workers 0``) against threaded decode/write, in the same run, and prints the ratio::

    python benchmarks/bench_predict.py --input-dir data/ISIC2017/ISIC-2017_Validation_Data

Otherwise each row times the whole pipeline of ``skinet predict`` minus file I/O: resize to the
training ``image_size`` and normalise, forward (x4 with TTA), resize probabilities back to 512x512,
threshold. Rows: eager PyTorch, TorchScript (``torch.jit.trace``) and ONNX Runtime (when
``onnx``, ``onnxscript`` and ``onnxruntime`` are installed), each with and without TTA. Runs on
CUDA when available (exported rows stay on CPU). Prints a table; asserts nothing.

The script re-executes itself with ``MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=2147483647``
so glibc keeps freed memory instead of page-faulting it back every batch (docs/development.md).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from skinet.config.experiment import ExperimentConfig, parse_config
from skinet.inference.export import (
    ProbabilityModel,
    export_onnx,
    export_torchscript,
    load_exported,
)
from skinet.inference.predictor import Predictor
from skinet.inference.tta import FLIPS
from skinet.runtime.allocator import reexec_with_malloc_env

ProbsFn = Callable[[torch.Tensor], torch.Tensor]


def make_checkpoint(folder: Path, image_size: int) -> Path:
    """A checkpoint in the training format for the default model, with random weights."""
    from skinet.models.unet2d import UNet2D

    cfg: ExperimentConfig = parse_config({"DATA_CONFIG": {"image_size": image_size}})
    model = UNet2D(**cfg.model.model_dump())
    path = folder / "random.ckpt"
    torch.save(
        {
            "state_dict": {f"model.{k}": v for k, v in model.state_dict().items()},
            "skinet": {
                "config": cfg.to_yaml_dict(),
                "val_optimal_threshold": 0.5,
                "threshold_used": 0.5,
            },
        },
        path,
    )
    return path


def with_tta(probs_fn: ProbsFn) -> ProbsFn:
    def averaged(images: torch.Tensor) -> torch.Tensor:
        total = torch.zeros(())
        for dims in FLIPS:
            view = images.flip(dims) if dims else images
            probs = probs_fn(view.contiguous())
            total = total + (probs.flip(dims) if dims else probs)
        return total / len(FLIPS)

    return averaged


def time_exported(
    predictor: Predictor, probs_fn: ProbsFn, images: list[np.ndarray], batch_size: int
) -> float:
    """Seconds for the predict pipeline with ``probs_fn`` (normalised -> probabilities)."""
    import cv2

    started = time.perf_counter()
    for start in range(0, len(images), batch_size):
        chunk = images[start : start + batch_size]
        batch = torch.from_numpy(np.stack([predictor.preprocess(im) for im in chunk]))
        probs = probs_fn(batch)[:, 0].numpy()
        for image, p in zip(chunk, probs, strict=True):
            resized = cv2.resize(p, image.shape[1::-1], interpolation=cv2.INTER_LINEAR)
            predictor.binarize(resized)
    return time.perf_counter() - started


def time_eager(predictor: Predictor, images: list[np.ndarray]) -> float:
    started = time.perf_counter()
    predictor.predict_batch(images)
    if predictor.device.type == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - started


def time_folder(
    predictor: Predictor, paths: list[Path], out: Path, io_workers: int, repeats: int
) -> float:
    """Best images/s of ``predict_paths`` over ``repeats`` (masks written to ``out``)."""
    from skinet.inference.predict import predict_paths

    best = float("inf")
    for _ in range(repeats):
        shutil.rmtree(out, ignore_errors=True)
        started = time.perf_counter()
        report = predict_paths(predictor, paths, out, progress=False, io_workers=io_workers)
        best = min(best, time.perf_counter() - started)
        if report.failures:
            raise SystemExit(f"{len(report.failures)} file(s) failed: {report.failures}")
    return len(paths) / best


def bench_folder(args: argparse.Namespace, predictor: Predictor, tmp: Path) -> None:
    """Serial vs threaded ``skinet predict`` on the files of ``--input-dir``."""
    from skinet.inference.predict import list_images

    paths = list_images(args.input_dir)[: args.num_images]
    if not paths:
        raise SystemExit(f"no images in {args.input_dir}")
    time_folder(predictor, paths[: args.batch_size], tmp / "warm", 0, 1)  # warm-up
    rates = {}
    for workers in (0, args.io_workers, 0, args.io_workers):  # interleaved: drift hits both
        rate = time_folder(predictor, paths, tmp / f"out{workers}", workers, args.repeats)
        rates[workers] = max(rates.get(workers, 0.0), rate)
    print(f"{len(paths)} files from {args.input_dir}, batch {args.batch_size}")
    print(f"{'io_workers':<12} {'images/s':>9}")
    for workers, rate in rates.items():
        print(f"{workers:<12} {rate:>9.2f}")
    print(f"threaded / serial: {rates[args.io_workers] / rates[0]:.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--checkpoint", type=Path, help="default: random default-config model")
    parser.add_argument("--image-size", type=int, default=256, help="training size (random model)")
    parser.add_argument("--input-size", type=int, default=512)
    parser.add_argument("--num-images", type=int, default=16)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=2, help="timed repeats (best is reported)")
    parser.add_argument("--input-dir", type=Path, help="time `skinet predict` on these files")
    parser.add_argument("--io-workers", type=int, default=2, help="threads of the threaded row")
    args = parser.parse_args()
    if args.input_dir is not None and args.num_images == parser.get_default("num_images"):
        args.num_images = 64
    reexec_with_malloc_env()
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    side = args.input_size
    images = [rng.integers(0, 256, (side, side, 3), dtype=np.uint8) for _ in range(args.num_images)]

    with tempfile.TemporaryDirectory() as tmp:
        checkpoint = args.checkpoint or make_checkpoint(Path(tmp), args.image_size)
        predictor = Predictor.from_checkpoint(checkpoint, batch_size=args.batch_size)
        print(
            f"device={predictor.device} threads={torch.get_num_threads()} image_size="
            f"{predictor.image_size} inputs={args.num_images}x{side}x{side} "
            f"batch={args.batch_size} MALLOC_MMAP_MAX_={os.environ.get('MALLOC_MMAP_MAX_')}"
        )
        if args.input_dir is not None:
            bench_folder(args, predictor, Path(tmp))
            return
        rows: list[tuple[str, bool, float]] = []

        def measure(name: str, tta: bool, run: Callable[[], float]) -> None:
            run()  # warm-up (TorchScript profiling runs, allocator, ORT arenas)
            best = min(run() for _ in range(args.repeats))
            rows.append((name, tta, args.num_images / best))

        for tta in (False, True):
            predictor.tta = tta
            measure("eager", tta, lambda: time_eager(predictor, images))
        predictor.tta = False

        cpu_model = ProbabilityModel(predictor.model.float().cpu()).eval()
        example = torch.randn(args.batch_size, 3, predictor.image_size, predictor.image_size)
        exported: dict[str, Path] = {}
        ts_path = Path(tmp) / "model.pt"
        export_torchscript(cpu_model, example, ts_path)
        exported["torchscript (cpu)"] = ts_path
        if all(importlib.util.find_spec(m) for m in ("onnx", "onnxscript", "onnxruntime")):
            onnx_path = Path(tmp) / "model.onnx"
            export_onnx(cpu_model, example, onnx_path, opset=18)
            exported["onnxruntime (cpu)"] = onnx_path
        for name, path in exported.items():
            fmt = "torchscript" if path.suffix == ".pt" else "onnx"
            probs_fn = load_exported(path, fmt)  # type: ignore[arg-type]
            for tta in (False, True):
                fn = with_tta(probs_fn) if tta else probs_fn
                measure(
                    name, tta, lambda fn=fn: time_exported(predictor, fn, images, args.batch_size)
                )

    print(f"{'runtime':<20} {'tta':<5} {'images/s':>9}")
    for name, tta, rate in rows:
        print(f"{name:<20} {str(tta):<5} {rate:>9.2f}")


if __name__ == "__main__":
    main()
