"""Training speed of a recipe against the same recipe with batch norm, side by side in one run.

Usage::

    python benchmarks/bench_recipe_speed.py                      # configs/cpu_budget.yaml, ~6 min
    python benchmarks/bench_recipe_speed.py --rounds 3 --epochs 3 --num-train 128
    python benchmarks/bench_recipe_speed.py --variant 'group=MODEL_CONFIG.norm=group'
    python benchmarks/bench_recipe_speed.py --variant 'fp32=TRAIN_CONFIG.precision=32-true'

Two figures per variant, measured in turns (A B A B ...) so that a drift of the machine's speed
hits every variant alike:

- **fit loop**: ``python -m skinet train`` of ``--config`` as shipped (its augmentations, RAM
  cache, workers, ``channels_last`` as resolved, MLflow to a temporary SQLite store,
  checkpoints) on ``--num-train`` synthetic training images, ``--epochs`` epochs; the median
  of the ``perf/samples_per_sec`` steps MLflow recorded after the first epoch (the first epoch
  warms up caches, workers and ``torch.compile``);
- **model-only**: forward, loss (the config's, deep supervision included), backward and AdamW
  step of the config's UNet2D on random tensors in this process, its memory format as
  training resolves it, under bfloat16 autocast where ``TRAIN_CONFIG.precision`` is
  ``bf16-mixed`` (as Lightning runs the step).

Each variant is the config plus overrides; ``batch`` (``MODEL_CONFIG.norm=batch``) is the
reference the ratios are taken against. Asserts nothing.
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
from typing import Any

import torch
import yaml

from skinet.runtime.allocator import MALLOC_ENV, reexec_with_malloc_env

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_norm import autocast_bf16, config_loss_step, step_rate  # noqa: E402

REFERENCE = "batch"


def parse_variant(text: str) -> tuple[str, dict[str, Any]]:
    """``NAME=SECTION.key=value[;SECTION.key=value]`` -> (name, overrides)."""
    name, _, body = text.partition("=")
    overrides = {}
    for item in filter(None, body.split(";")):
        key, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"--variant {text!r}: expected NAME=SECTION.key=value[;...]")
        overrides[key] = yaml.safe_load(value)
    return name, overrides


def fit_rate(
    config: Path, overrides: dict[str, Any], data_dir: Path, work: Path, epochs: int
) -> float:
    """Median training images/s of the steps after the first epoch of one ``skinet train``."""
    from mlflow.tracking import MlflowClient

    runs = work / "runs"
    settings = {
        **overrides,
        "DATA_CONFIG.data_dir": str(data_dir),
        "DATA_CONFIG.test_fraction": 0.0,
        "TRAIN_CONFIG.output_dir": str(runs),
        "TRAIN_CONFIG.max_epochs": epochs,
        # The epochs end the run; a budget it never reaches keeps a cosine_budget schedule valid.
        "TRAIN_CONFIG.max_time": "00:01:00:00",
        # Every epoch at image_size, as the model-only step is timed.
        "DATA_CONFIG.progressive_resizing": None,
        "TRAIN_CONFIG.enable_progress_bar": False,
        "TRAIN_CONFIG.log_every_n_steps": 1,
        "TRAIN_CONFIG.mlflow_config.tracking_uri": None,
    }
    command = [sys.executable, "-m", "skinet", "train", "--config", str(config), "--no-visualize"]
    for key, value in settings.items():
        command += ["--set", f"{key}={json.dumps(value)}"]
    env = {**os.environ, **MALLOC_ENV}
    done = subprocess.run(command, capture_output=True, text=True, env=env)
    if done.returncode != 0:
        raise SystemExit(f"skinet train failed ({done.returncode}):\n{done.stdout[-3000:]}")
    client = MlflowClient(f"sqlite:///{runs / 'mlflow.db'}")
    (experiment,) = [e for e in client.search_experiments() if e.name != "Default"]
    (run,) = client.search_runs([experiment.experiment_id])
    history = client.get_metric_history(run.info.run_id, "perf/samples_per_sec")
    steps_per_epoch = len(history) // epochs
    later = [m.value for m in sorted(history, key=lambda m: m.step)[steps_per_epoch:]]
    return statistics.median(later)


def model_rate(config: Path, overrides: dict[str, Any], steps: int) -> float:
    """Model-only training-step images/s of the config's UNet2D, as training lays it out."""
    from skinet.config.experiment import load_config
    from skinet.models.layers import uses_channels_last
    from skinet.models.unet2d import UNet2D
    from skinet.runtime.devices import BF16_PRECISIONS

    cfg = load_config(config, overrides)
    torch.manual_seed(0)
    model = UNet2D(**cfg.model.model_dump()).train()
    channels_last = uses_channels_last(cfg.train.channels_last, cfg.model.norm, "cpu")
    memory_format = torch.channels_last if channels_last else torch.contiguous_format
    model = model.to(memory_format=memory_format)  # type: ignore[call-overload]
    size, batch = cfg.data.image_size, cfg.train.batch_size
    images = torch.randn(batch, 3, size, size).contiguous(memory_format=memory_format)
    masks = (torch.rand(batch, 1, size, size) > 0.5).float()
    loss_step = config_loss_step(cfg)
    if cfg.train.precision in BF16_PRECISIONS:
        loss_step = autocast_bf16(loss_step)
    return step_rate(model, images, masks, steps, 2, loss_step)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", type=Path, default=REPO / "configs" / "cpu_budget.yaml")
    parser.add_argument("--num-train", type=int, default=96)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--model-steps", type=int, default=8)
    parser.add_argument(
        "--variant",
        action="append",
        default=[],
        metavar="NAME=SECTION.KEY=VALUE[;...]",
        help="another variant besides 'shipped' and 'batch' (repeatable)",
    )
    args = parser.parse_args()
    from skinet.datasets.synthetic import make_synthetic_dataset

    variants = {"shipped": {}, REFERENCE: {"MODEL_CONFIG.norm": "batch"}}
    variants.update(parse_variant(text) for text in args.variant)
    fit: dict[str, list[float]] = {name: [] for name in variants}
    model: dict[str, list[float]] = {name: [] for name in variants}
    with tempfile.TemporaryDirectory(prefix="skinet-recipe-speed-") as tmp:
        data = make_synthetic_dataset(Path(tmp) / "data", args.num_train, 8, 0, 256, seed=0)
        print(
            f"config={args.config.name} num_train={args.num_train} epochs={args.epochs} "
            f"rounds={args.rounds} threads={torch.get_num_threads()}",
            flush=True,
        )
        for round_index in range(args.rounds):
            for name, overrides in variants.items():
                work = Path(tmp) / f"{name}{round_index}"
                fit[name].append(fit_rate(args.config, overrides, data, work, args.epochs))
                model[name].append(model_rate(args.config, overrides, args.model_steps))
                print(
                    f"  round {round_index + 1} {name}: fit {fit[name][-1]:.1f}, "
                    f"model-only {model[name][-1]:.1f} images/s",
                    flush=True,
                )
    reference_fit = statistics.median(fit[REFERENCE])
    reference_model = statistics.median(model[REFERENCE])
    print("\n| variant | fit-loop images/s | vs batch | model-only images/s | vs batch |")
    print("|---|---:|---:|---:|---:|")
    for name in variants:
        f, m = statistics.median(fit[name]), statistics.median(model[name])
        print(
            f"| {name} | {f:.1f} | {f / reference_fit:.3f} | {m:.1f} | {m / reference_model:.3f} |"
        )


if __name__ == "__main__":
    reexec_with_malloc_env()
    main()
