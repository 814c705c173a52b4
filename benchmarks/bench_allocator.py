"""Training speed of ``skinet train`` with glibc's allocator tuned (the default) and untuned.

Each round trains the same config twice, from the command line a user types
(``python -m skinet train``), in a fresh process each time: once as shipped (the command
restarts itself with ``MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=2147483647``, see
``skinet/runtime/allocator.py``) and once with ``SKINET_MALLOC_TUNING=0`` (glibc's defaults). The
order alternates every round. Figures: training images/s of a step (the median
``perf/samples_per_sec`` the run logged to MLflow at every step) and over the whole fit
(``fit_seconds`` of the run's ``metrics.json``: validation, checkpoints and start-up included),
the medians over rounds and the ratio tuned / untuned of each round. Asserts nothing.

    python benchmarks/bench_allocator.py                  # cpu_budget.yaml recipe, ~6 minutes
    python benchmarks/bench_allocator.py --rounds 5 --num-train 128
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from skinet.runtime.allocator import MALLOC_ENV, OPT_OUT

REPO = Path(__file__).resolve().parents[1]
VARIANTS = ("tuned", "untuned")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", type=Path, default=REPO / "configs" / "cpu_budget.yaml")
    parser.add_argument("--image-size", type=int, default=128)
    parser.add_argument("--num-train", type=int, default=96, help="synthetic training images")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workdir", type=Path, help="default: a temporary folder")
    return parser.parse_args()


def train_once(
    args: argparse.Namespace, workdir: Path, variant: str, tag: str
) -> tuple[float, float]:
    """Train in a fresh ``python -m skinet`` process; images/s of a step and over the fit."""
    env = {k: v for k, v in os.environ.items() if k not in MALLOC_ENV and k != OPT_OUT}
    if variant == "untuned":
        env[OPT_OUT] = "0"
    output = workdir / "runs" / tag
    overrides = {
        "TRAIN_CONFIG.output_dir": str(output),
        "TRAIN_CONFIG.max_epochs": args.epochs,
        "TRAIN_CONFIG.max_time": None,
        "TRAIN_CONFIG.enable_progress_bar": False,
        "TRAIN_CONFIG.log_every_n_steps": 1,
        "TRAIN_CONFIG.use_mlflow_logger": True,
        "TRAIN_CONFIG.mlflow_config.tracking_uri": None,
        "DATA_CONFIG.dataset": "synthetic",
        "DATA_CONFIG.data_dir": str(workdir / "synthetic"),
        "DATA_CONFIG.image_size": args.image_size,
        "DATA_CONFIG.synthetic_num_train": args.num_train,
        "DATA_CONFIG.synthetic_num_val": 16,
        "DATA_CONFIG.synthetic_num_test": 8,
        "DATA_CONFIG.synthetic_image_size": 2 * args.image_size,
        "DATA_CONFIG.cache_dir": str(workdir / "cache"),
    }
    command = [sys.executable, "-m", "skinet", "train", "--config", str(args.config)]
    command.append("--no-visualize")
    for key, value in overrides.items():
        command += ["--set", f"{key}={json.dumps(value)}"]
    proc = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        sys.exit(f"{variant} run failed ({proc.returncode}):\n{proc.stdout[-3000:]}{proc.stderr}")
    metrics = json.loads(next(output.rglob("metrics.json")).read_text())
    fit = args.num_train * args.epochs / float(metrics["fit_seconds"])
    return step_images_per_second(output, metrics["mlflow_run_id"]), fit


def step_images_per_second(output: Path, run_id: str) -> float:
    """The median of the run's logged ``perf/samples_per_sec`` (every training step)."""
    from mlflow.tracking import MlflowClient

    (store,) = output.rglob("*.db")
    client = MlflowClient(tracking_uri=f"sqlite:///{store}")
    return statistics.median(
        m.value for m in client.get_metric_history(run_id, "perf/samples_per_sec")
    )


def main() -> None:
    args = parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        workdir = (args.workdir or Path(tmp)).resolve()
        train_once(args, workdir, "tuned", "warmup")  # the synthetic set and its cache
        speeds: dict[str, list[tuple[float, float]]] = {v: [] for v in VARIANTS}
        for r in range(args.rounds):
            for variant in VARIANTS if r % 2 == 0 else VARIANTS[::-1]:
                speeds[variant].append(train_once(args, workdir, variant, f"{variant}{r}"))
            (t_step, t_fit), (u_step, u_fit) = speeds["tuned"][-1], speeds["untuned"][-1]
            print(
                f"round {r}: step images/s tuned {t_step:.2f} untuned {u_step:.2f} "
                f"(ratio {t_step / u_step:.3f}); fit images/s tuned {t_fit:.2f} "
                f"untuned {u_fit:.2f} (ratio {t_fit / u_fit:.3f})",
                flush=True,
            )
    print(
        f"\n{args.config.name} at {args.image_size} px, {args.num_train} synthetic training "
        f"images, {args.epochs} epochs, {args.rounds} rounds, {os.cpu_count()} CPUs (medians)"
    )
    print(f"{'':18}{'tuned':>10}{'untuned':>10}{'ratio':>8}  per-round ratios")
    for column, name in enumerate(("step images/s", "fit images/s")):
        tuned = [x[column] for x in speeds["tuned"]]
        untuned = [x[column] for x in speeds["untuned"]]
        ratios = [t / u for t, u in zip(tuned, untuned, strict=True)]
        print(
            f"{name:18}{statistics.median(tuned):10.2f}{statistics.median(untuned):10.2f}"
            f"{statistics.median(ratios):8.3f}  {', '.join(f'{x:.3f}' for x in ratios)}"
        )


if __name__ == "__main__":
    main()
