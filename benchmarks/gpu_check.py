"""One GPU readiness check: production training, model speed, loader vs model, prediction.

Usage::

    python benchmarks/gpu_check.py --out gpu_check_out                  # one CUDA GPU, < 8 min
    python benchmarks/gpu_check.py --device cpu --quick --out /tmp/gc   # CPU smoke run, ~30 s

Sections, recorded in ``<out>/gpu_check.json`` (rewritten after every section, so a run cut
short keeps what it measured) and ``<out>/gpu_check.md``:

1. **train**: ``configs/main_config.yaml`` (attention gate, ``deterministic: true``) for
   ``--epochs`` at ``--image-size`` on data from the project's synthetic generator, once per
   ``--precisions``, with ``use_torch_compile`` on ``--compile-backend``; MLflow off. Checks: the
   run finishes with finite metrics; ``grad_scale`` is logged under ``16-mixed`` (CUDA only:
   on CPU Lightning runs ``16-mixed`` as ``bf16-mixed``, which has no gradient scaler).
2. **combos**: forward+backward images/s of the encoder x merge combinations with
   ``channels_last``, eager, then ``torch.compile`` (``bench_models.time_steps``). Compiled
   combinations run while ``--budget-s`` lasts; the rest are recorded as skipped.
3. **loader**: training-loader images/s with ``num_workers`` = the CPU count
   (``bench_dataloader.bench_loader``) against the model's training images/s on the device
   (``bench_dataloader.bench_model``).
4. **predict**: the prediction pipeline on 512x512 inputs (``bench_predict.time_eager``) and
   ``skinet predict`` on a folder of PNGs, images/s.
5. **norms**: a training step of the ``cpu_budget.yaml`` UNet2D with each normalisation form,
   contiguous and ``channels_last`` (``bench_norm``): the measurement behind the CUDA row of
   ``skinet.models.layers.CHANNELS_LAST_BY_DEVICE``.

Exit status 0 when every check passed, 1 otherwise. Neither MLflow nor Optuna is imported.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))  # the sibling benchmark scripts are reused as modules

import bench_dataloader  # noqa: E402
import bench_models  # noqa: E402
import bench_norm  # noqa: E402
import bench_predict  # noqa: E402
import cv2  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402

from skinet.config.experiment import ExperimentConfig, load_config  # noqa: E402
from skinet.datasets.synthetic import make_synthetic_dataset  # noqa: E402
from skinet.keys import MetricsKey  # noqa: E402

PRODUCTION_CONFIG = HERE.parent / "configs" / "main_config.yaml"
QUICK_COMBOS = ["classical:attention_gate", "he2:he2"]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="folder for the JSON, table, runs")
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--quick", action="store_true", help="tiny sizes, 2 combos, eager only")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--image-size", type=int, default=256)
    parser.add_argument("--num-train", type=int, default=96, help="synthetic training images")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--precisions", nargs="+", default=["16-mixed", "bf16-mixed"])
    parser.add_argument("--compile-backend", default="inductor")
    parser.add_argument("--combos", nargs="+", metavar="ENC:MERGE", help="default: all 20")
    parser.add_argument("--combo-modes", nargs="+", choices=("eager", "compiled"))
    parser.add_argument("--steps", type=int, default=10, help="timed steps per combination")
    parser.add_argument("--budget-s", type=float, default=420.0, help="compiled combos stop here")
    args = parser.parse_args(argv)
    if args.quick:
        args.epochs, args.image_size, args.num_train, args.batch_size = 1, 32, 8, 4
        args.combos = args.combos or QUICK_COMBOS
        args.combo_modes = args.combo_modes or ["eager"]
        args.steps = 2
    args.combo_modes = args.combo_modes or ["eager", "compiled"]
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: torch sees no CUDA device here (use --device cpu)")
    return args


class Report:
    """The check's results, written as JSON and a Markdown table after every section."""

    def __init__(self, out: Path) -> None:
        self.out = out
        self.data: dict[str, Any] = {"environment": environment(), "checks": {}}

    def check(self, name: str, passed: bool, detail: str) -> None:
        self.data["checks"][name] = {"passed": bool(passed), "detail": detail}

    @property
    def passed(self) -> bool:
        return all(c["passed"] for c in self.data["checks"].values())

    def save(self) -> None:
        self.out.mkdir(parents=True, exist_ok=True)
        (self.out / "gpu_check.json").write_text(json.dumps(self.data, indent=2, default=str))
        (self.out / "gpu_check.md").write_text(markdown(self.data))


def environment() -> dict[str, Any]:
    import lightning

    info: dict[str, Any] = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "lightning": lightning.__version__,
        "cuda": torch.version.cuda,
        "cpus": os.cpu_count(),
        "modules_absent": absent_modules(),
    }
    if torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name(0)
        info["cudnn"] = torch.backends.cudnn.version()
    return info


def absent_modules() -> list[str]:
    """Which of the tracking packages this process never imported (or could not)."""
    return [m for m in ("mlflow", "optuna") if sys.modules.get(m) is None]


def guarded(report: Report, section: str, run: Callable[[], None]) -> None:
    """Run one section; an exception fails its check instead of ending the whole script."""
    started = time.perf_counter()
    try:
        run()
    except Exception as error:
        report.check(section, False, f"{type(error).__name__}: {error}")
        report.data.setdefault("errors", {})[section] = traceback.format_exc()
        print(traceback.format_exc(), file=sys.stderr)
    report.data.setdefault("section_seconds", {})[section] = round(time.perf_counter() - started, 1)
    report.save()


def production_config(
    args: argparse.Namespace, data_root: Path, precision: str
) -> ExperimentConfig:
    """The shipped production config on the synthetic set, tracking off, compile on."""
    overrides: dict[str, Any] = {
        "TRAIN_CONFIG.output_dir": str(args.out / "runs" / precision),
        "TRAIN_CONFIG.max_epochs": args.epochs,
        "TRAIN_CONFIG.batch_size": args.batch_size,
        "TRAIN_CONFIG.accelerator": "gpu" if args.device == "cuda" else "cpu",
        "TRAIN_CONFIG.devices": 1,
        "TRAIN_CONFIG.precision": precision,
        "TRAIN_CONFIG.deterministic": True,
        "TRAIN_CONFIG.use_torch_compile": True,
        "TRAIN_CONFIG.torch_compile_backend": args.compile_backend,
        "TRAIN_CONFIG.use_mlflow_logger": False,
        "TRAIN_CONFIG.use_early_stopping": False,
        "TRAIN_CONFIG.enable_progress_bar": False,
        "TRAIN_CONFIG.num_workers": os.cpu_count() or 1,
        "TRAIN_CONFIG.log_every_n_steps": 1,
        "DATA_CONFIG.dataset": "isic2017",
        "DATA_CONFIG.data_dir": str(data_root),
        "DATA_CONFIG.image_size": args.image_size,
    }
    if args.quick:
        overrides.update(
            {
                "TRAIN_CONFIG.num_workers": 0,
                "TRAIN_CONFIG.num_sanity_val_steps": 0,
                "MODEL_CONFIG.out_channels_layer1": 8,
                "MODEL_CONFIG.number_of_layers": 3,
            }
        )
    return load_config(PRODUCTION_CONFIG, overrides)


def section_train(args: argparse.Namespace, report: Report, data_root: Path) -> None:
    from skinet.training.run import run_training

    rows = report.data.setdefault("train", {})
    for precision in args.precisions:
        cfg = production_config(args, data_root, precision)
        model = cfg.model
        print(f"train: {precision}, {model.encoder_residual_mode}:{model.merge_residual_mode}")
        try:
            result = run_training(cfg, visualize=True)
        except Exception as error:
            rows[precision] = {"error": f"{type(error).__name__}: {error}"}
            report.check(f"train {precision}", False, rows[precision]["error"])
            report.data.setdefault("errors", {})[f"train {precision}"] = traceback.format_exc()
            report.save()
            continue
        metrics = result.metrics
        steps = max(1, math.ceil(args.num_train / args.batch_size)) * result.epochs_trained
        rows[precision] = {
            "fit_seconds": result.fit_seconds,
            "epochs": result.epochs_trained,
            "train_images_per_sec_incl_compile": round(
                steps * args.batch_size / result.fit_seconds, 1
            ),
            "val_dice": metrics.get("val_dice"),
            "test_dice": metrics.get("test_dice"),
            "grad_scale": metrics.get(MetricsKey.GRAD_SCALE.value),
            "checkpoint": str(result.best_checkpoint),
        }
        finite = all(math.isfinite(v) for v in metrics.values())
        report.check(f"train {precision}", finite, f"{len(metrics)} metrics, all finite: {finite}")
        if precision == "16-mixed":
            logged = MetricsKey.GRAD_SCALE.value in metrics
            if args.device == "cuda":
                report.check("grad_scale logged under 16-mixed", logged, f"logged: {logged}")
            else:
                rows[precision]["note"] = "CPU runs 16-mixed as bf16-mixed: no scaler to log"
        report.save()


def section_combos(args: argparse.Namespace, report: Report, deadline: float) -> None:
    device = torch.device(args.device)
    size = args.image_size
    images = torch.randn(args.batch_size, 3, size, size, device=device)
    images = images.contiguous(memory_format=torch.channels_last)
    rows = report.data.setdefault("combos", [])
    model_kwargs: dict[str, Any] = {}
    if args.quick:
        model_kwargs = {"out_channels_layer1": 8, "number_of_layers": 3}
    for mode in args.combo_modes:
        for encoder_mode, merge_mode in bench_models.resolve_combos(args.combos):
            combo = f"{encoder_mode}:{merge_mode}"
            if mode == "compiled" and time.monotonic() > deadline:
                rows.append({"combo": combo, "mode": mode, "skipped": "--budget-s spent"})
                continue
            torch.manual_seed(0)
            model = bench_models.UNet2D(
                encoder_residual_mode=encoder_mode, merge_residual_mode=merge_mode, **model_kwargs
            )
            model = model.to(device, memory_format=torch.channels_last).train()
            if mode == "compiled":
                torch._dynamo.reset()
                model = bench_models.compile_model(model, args.compile_backend)
            speed, peak = bench_models.time_steps(model, images, args.steps, 2, device)
            rows.append(
                {"combo": combo, "mode": mode, "images_per_sec": round(speed, 1), "peak_mib": peak}
            )
            print(f"combos: {combo} {mode} {speed:.1f} images/s")
            report.save()
    done = [r for r in rows if "images_per_sec" in r]
    modes = "/".join(args.combo_modes)
    report.check(f"combos {modes}", bool(done), f"{len(done)} of {len(rows)} timed so far")


def section_loader(args: argparse.Namespace, report: Report, data_root: Path) -> None:
    cfg = production_config(args, data_root, args.precisions[-1])
    cfg.train.num_workers = os.cpu_count() or 1
    # Epoch 1 (worker start-up) is not timed; the others are.
    loader_speed, memory, cache_mb = bench_dataloader.bench_loader(
        cfg, epochs=2 if args.quick else 4
    )
    model_speed = bench_dataloader.bench_model(cfg, steps=args.steps, device=args.device)
    report.data["loader"] = {
        "num_workers": cfg.train.num_workers,
        "loader_images_per_sec": round(loader_speed, 1),
        "model_train_images_per_sec": round(model_speed or 0.0, 1),
        "ratio": round(loader_speed / model_speed, 2) if model_speed else None,
        "precision": cfg.train.precision,
        "worker_rss_uss_mb_per_epoch": memory,
        "cache_mb": round(cache_mb, 1),
    }
    report.check("loader measured", loader_speed > 0, f"{loader_speed:.1f} images/s")


def section_predict(args: argparse.Namespace, report: Report) -> None:
    from skinet.cli.main import main as skinet_main
    from skinet.inference.predictor import Predictor

    trained = [r.get("checkpoint") for r in report.data.get("train", {}).values()]
    checkpoint = next((Path(c) for c in trained if c and c != "None"), None)
    if checkpoint is None:
        checkpoint = bench_predict.make_checkpoint(args.out, args.image_size)
    count = 8 if args.quick else 64
    rng = np.random.default_rng(0)
    images = [rng.integers(0, 256, (512, 512, 3), dtype=np.uint8) for _ in range(count)]
    predictor = Predictor.from_checkpoint(checkpoint, device=args.device, batch_size=8)
    bench_predict.time_eager(predictor, images[:8])  # warm-up
    pipeline = count / bench_predict.time_eager(predictor, images)

    folder = args.out / "predict_in"
    folder.mkdir(parents=True, exist_ok=True)
    for i, image in enumerate(images):
        cv2.imwrite(str(folder / f"img_{i:03d}.png"), image)
    argv = ["predict", "--checkpoint", str(checkpoint), "--images", str(folder)]
    argv += ["--output", str(args.out / "predict_out"), "--device", args.device]
    skinet_main(argv)  # warm-up: model load, allocator
    started = time.perf_counter()
    code = skinet_main(argv)
    cli = count / (time.perf_counter() - started)
    report.data["predict"] = {
        "checkpoint": str(checkpoint),
        "inputs": f"{count} x 512x512",
        "pipeline_images_per_sec": round(pipeline, 1),
        "cli_images_per_sec": round(cli, 1),
    }
    report.check("skinet predict", code == 0, f"exit {code}, {cli:.1f} images/s with file I/O")


def section_norms(args: argparse.Namespace, report: Report) -> None:
    device = torch.device(args.device)
    size = 64 if args.quick else args.image_size
    images = torch.randn(args.batch_size, 3, size, size, device=device)
    masks = (torch.rand(args.batch_size, 1, size, size, device=device) > 0.5).float()
    rows = report.data.setdefault("norms", [])
    for form in bench_norm.FORMS:
        for channels_last in (False, True):
            model = bench_norm.build(form, channels_last, device)
            memory_format = torch.channels_last if channels_last else torch.contiguous_format
            batch = images.contiguous(memory_format=memory_format)
            speed = bench_norm.step_rate(model, batch, masks, args.steps, 2)
            rows.append(
                {"form": form, "channels_last": channels_last, "images_per_sec": round(speed, 1)}
            )
            print(f"norms: {form} channels_last={channels_last} {speed:.1f} images/s")
    report.save()
    report.check("norms", len(rows) == 2 * len(bench_norm.FORMS), f"{len(rows)} forms timed")


def markdown(data: dict[str, Any]) -> str:
    env = data["environment"]
    lines = [
        f"GPU check on {env.get('gpu', 'CPU')} ({env['cpus']} CPUs), torch {env['torch']}, "
        f"Lightning {env['lightning']}, CUDA {env['cuda']}",
        "",
        "| check | passed | detail |",
        "|---|---|---|",
    ]
    lines += [
        f"| {name} | {'yes' if c['passed'] else '**NO**'} | {c['detail']} |"
        for name, c in data["checks"].items()
    ]
    if data.get("train"):
        lines += ["", "| precision | fit s | images/s (incl. compile) | test Dice | grad_scale |"]
        lines += ["|---|---:|---:|---:|---:|"]
        for precision, row in data["train"].items():
            if "error" in row:
                lines.append(f"| {precision} | failed: {row['error'][:120]} | | | |")
                continue
            test_dice = "n/a" if row["test_dice"] is None else f"{row['test_dice']:.4f}"
            scale = "not logged" if row["grad_scale"] is None else f"{row['grad_scale']:g}"
            lines.append(
                f"| {precision} | {row['fit_seconds']} | {row['train_images_per_sec_incl_compile']}"
                f" | {test_dice} | {scale} |"
            )
    if data.get("combos"):
        speeds: dict[str, dict[str, Any]] = {}
        for row in data["combos"]:
            speeds.setdefault(row["combo"], {})[row["mode"]] = row.get("images_per_sec", "skip")
        lines += ["", "| combo (channels_last) | eager images/s | compiled images/s |"]
        lines += ["|---|---:|---:|"]
        for combo, by_mode in speeds.items():
            lines.append(
                f"| {combo} | {by_mode.get('eager', '')} | {by_mode.get('compiled', '')} |"
            )
    if data.get("loader"):
        row = data["loader"]
        lines += [
            "",
            f"Loader ({row['num_workers']} workers): {row['loader_images_per_sec']} images/s; "
            f"model training ({row['precision']}): {row['model_train_images_per_sec']} images/s; "
            f"ratio {row['ratio']}",
        ]
    if data.get("predict"):
        row = data["predict"]
        lines += [
            "",
            f"Predict ({row['inputs']}): pipeline {row['pipeline_images_per_sec']} images/s, "
            f"`skinet predict` with file I/O {row['cli_images_per_sec']} images/s",
        ]
    if data.get("norms"):
        lines += ["", "| norm form | channels_last | training images/s |", "|---|---|---:|"]
        lines += [
            f"| {r['form']} | {r['channels_last']} | {r['images_per_sec']} |" for r in data["norms"]
        ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    deadline = time.monotonic() + args.budget_s
    args.out.mkdir(parents=True, exist_ok=True)
    report = Report(args.out)
    data_root = args.out / "data"
    if not (data_root / "train").exists():
        num_eval = max(4, args.num_train // 6)
        make_synthetic_dataset(
            data_root, args.num_train, num_eval, num_eval, max(64, args.image_size), seed=0
        )
    # Eager timings, the loader and prediction come before the compiled timings, which take
    # whatever time is left (compiling 20 architectures can outlast any budget on its own).
    guarded(report, "train", lambda: section_train(args, report, data_root))
    eager_only = argparse.Namespace(**{**vars(args), "combo_modes": ["eager"]})
    if "eager" in args.combo_modes:
        guarded(report, "combos eager", lambda: section_combos(eager_only, report, deadline))
    guarded(report, "loader", lambda: section_loader(args, report, data_root))
    guarded(report, "predict", lambda: section_predict(args, report))
    guarded(report, "norms", lambda: section_norms(args, report))
    if "compiled" in args.combo_modes:
        compiled = argparse.Namespace(**{**vars(args), "combo_modes": ["compiled"]})
        guarded(report, "combos compiled", lambda: section_combos(compiled, report, deadline))
    report.data["environment"]["modules_absent"] = absent_modules()
    report.save()
    print((args.out / "gpu_check.md").read_text())
    return 0 if report.passed else 1


if __name__ == "__main__":
    sys.exit(main())
