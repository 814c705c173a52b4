"""Framework overhead: training images/s of SkiNet's Lightning fit loop vs a bare PyTorch loop.

Usage::

    python benchmarks/bench_framework_overhead.py                 # ~2-4 minutes on 2 CPU cores
    # the goal's run (benchmarks/README.md): about 5-8 minutes on 2 CPU cores
    python benchmarks/bench_framework_overhead.py --variants skinet --num-train 256 --epochs 2 \
        --rounds 6
    python benchmarks/bench_framework_overhead.py --variants skinet skinet-nolog lightning-min

Both sides train the same ``UNet2D`` (from ``--config``, else the default config; same seed, so
the same initial weights) with AdamW (``TRAIN_CONFIG.lr`` / ``weight_decay``) and
the config's loss (``bench_norm.config_loss_step``: ``loss_name``, ``bce_weight``,
``dice_reduction``, deep supervision), in the same memory format (``TRAIN_CONFIG.channels_last``
as SkiNet resolves it for the model's norm and device, ``uses_channels_last``: with ``null``,
``channels_last`` for batch norm on a CPU; checked after every fit), on the *same*
``DataLoader`` object (``build_dataloaders`` on a synthetic dataset, RAM cache on, the config's
workers, persistent). Variants:

* ``bare``: ``model.train(); for images, masks in loader: zero_grad(set_to_none=True);
  loss_fn(model(images), masks).backward(); optimizer.step()`` (always measured);
* ``skinet``: ``trainer.fit`` of ``LightningModel`` on SkiNet's ``build_trainer`` with every
  default callback of ``setup_logging_and_callbacks`` and MLflow to a temporary SQLite store;
* ``skinet-nolog``: the same without a logger (``use_mlflow_logger: false``);
* ``lightning-min``: ``LightningModel`` on a Trainer with no callback, logger, checkpointing or
  progress bar (isolates the LightningModule step and Lightning's loop from the callbacks).

Training epochs only: ``num_sanity_val_steps=0`` and ``limit_val_batches=1`` (one validation
batch keeps ``EarlyStopping``, ``ModelCheckpoint`` and ``ReduceLROnPlateau`` working as in a real
run), and the validation time (``on_validation_start`` .. ``on_validation_end``) is subtracted.
``deterministic=False`` and ``precision=32-true`` on both sides. A SkiNet epoch is timed from
``on_train_epoch_start`` to the next one (the last to ``on_train_end``), so per-epoch work after
the last batch (epoch metrics, logger writes, saving checkpoints) counts as training; the
"epoch-end ms/epoch" column shows it, so it can be spread over longer epochs, and the
"batch-loop ratio" leaves it out. Fit start-up and fit-end work (MLflow run, model summary,
plots) are reported separately as "fit fixed cost". Each variant runs ``--epochs`` epochs per
round and the first is discarded (warm-up); the variants are interleaved for ``--rounds`` rounds,
their order rotated each round (bare, skinet, nolog; skinet, nolog, bare; ...) because whichever
ran right after another was measurably slower, and the medians over rounds are compared. Asserts
nothing. The output of ``fit`` (model summary, progress bar, warnings) goes to /dev/null: the
rich progress bar is still updated every step but draws no live display off a terminal
(``--show-fit-output`` measures it as drawn in yours).

The script re-executes itself with ``MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=2147483647``:
glibc otherwise returns freed blocks to the system and page-faults them back every step, which
dominates CPU timings (see docs/development.md).
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import statistics
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from skinet.runtime.allocator import reexec_with_malloc_env

VARIANTS = ("skinet", "skinet-nolog", "lightning-min")
GOAL = 0.95  # whole training epochs: SkiNet within 5% of the bare loop
LOOP_GOAL = 0.97  # the batch loops alone


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", type=Path, help="YAML whose MODEL/TRAIN settings to use")
    parser.add_argument("--image-size", type=int, default=128)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--num-train", type=int, default=64, help="synthetic training images")
    parser.add_argument("--epochs", type=int, default=3, help="per variant and round; 1st dropped")
    parser.add_argument(
        "--rounds", type=int, default=3, help="a multiple of len(variants) + 1 balances the order"
    )
    parser.add_argument("--num-workers", type=int, help="default: the config's (CPU count)")
    parser.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    parser.add_argument(
        "--variants",
        nargs="+",
        choices=VARIANTS,
        default=["skinet", "skinet-nolog"],
        help="SkiNet variants measured against the bare loop",
    )
    parser.add_argument(
        "--show-fit-output",
        action="store_true",
        help="let the progress bar and warnings of trainer.fit reach stderr (default: discarded)",
    )
    args = parser.parse_args()
    if args.epochs < 2:
        parser.error("--epochs must be >= 2 (the first epoch is discarded)")
    if args.num_train < args.batch_size:
        parser.error("--num-train must be >= --batch-size")
    return args


@dataclass
class Measurement:
    """Epoch times of one variant in one round (warm-up epoch already removed)."""

    epoch_s: list[float]
    images: list[int]
    loop_s: list[float] = field(default_factory=list)  # first batch start .. last batch end
    fit_fixed_s: float | None = None  # trainer.fit wall time minus all epochs

    @property
    def images_per_sec(self) -> float:
        return sum(self.images) / sum(self.epoch_s)

    @property
    def loop_images_per_sec(self) -> float:
        """Images/s of the batch loops alone (the bare loop has nothing else)."""
        return sum(self.images) / sum(self.loop_s or self.epoch_s)

    @property
    def epoch_end_ms(self) -> float | None:
        """Mean per-epoch time outside the batch loop (epoch-end hooks, logging, checkpoint)."""
        if not self.loop_s:
            return None
        return 1000 * statistics.mean(e - b for e, b in zip(self.epoch_s, self.loop_s, strict=True))


@dataclass(frozen=True)
class Bench:
    """What every variant shares: the options, the device and the temporary folder."""

    args: argparse.Namespace
    device: Any  # torch.device
    root: Path
    base: dict[str, Any]  # the YAML of --config, or nothing


@dataclass(frozen=True)
class Data:
    """The config of the bare loop, the loaders every variant trains on, and their layout."""

    cfg: Any  # ExperimentConfig
    loaders: Any  # the train loader is the same object for every variant
    channels_last: bool


def resolve_device(name: str) -> Any:
    import torch

    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def sync(device: Any) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def make_config(bench: Bench, variant: str, round_index: int) -> Any:
    """The config of one variant's run: the base YAML with the benchmark's settings on top."""
    from skinet.config.experiment import parse_config

    args, root = bench.args, bench.root
    raw = {k: dict(v) for k, v in (bench.base or {}).items()}
    train = raw.setdefault("TRAIN_CONFIG", {})
    train.update(
        accelerator="gpu" if bench.device.type == "cuda" else "cpu",
        devices=1,
        strategy="auto",
        precision="32-true",
        deterministic=False,
        batch_size=args.batch_size,
        cache_in_ram=True,
        max_epochs=args.epochs,
        limit_train_batches=None,
        # One validation batch keeps EarlyStopping, ModelCheckpoint and ReduceLROnPlateau
        # working as in a real run; its time is subtracted (training epochs only).
        limit_val_batches=1,
        num_sanity_val_steps=0,
        output_dir=str(root / "runs"),
        experiment_name="bench_framework_overhead",
    )
    train["mlflow_config"] = {
        **train.get("mlflow_config", {}),
        "tracking_uri": f"sqlite:///{root / 'mlflow.db'}",
        "run_name": f"{variant}_round{round_index}",
    }
    if args.num_workers is not None:
        train["num_workers"] = args.num_workers
    if variant != "skinet":
        train["use_mlflow_logger"] = False
    if variant == "lightning-min":
        train.update(use_checkpoint=False, enable_progress_bar=False)
    raw["DATA_CONFIG"] = {
        **raw.get("DATA_CONFIG", {}),
        "dataset": "synthetic",
        "data_dir": str(root / "data"),
        "image_size": args.image_size,
        "synthetic_num_train": args.num_train,
        "synthetic_num_val": args.batch_size,
        "synthetic_num_test": args.batch_size,
        "synthetic_image_size": args.image_size,
        "max_samples_per_split": None,
    }
    return parse_config(raw, "bench_framework_overhead")


def prepare_data(bench: Bench) -> Data:
    """Generate the synthetic set and fill the RAM cache; print what is measured."""
    import torch

    from skinet.models.layers import uses_channels_last
    from skinet.training.data.loaders import build_dataloaders

    cfg = make_config(bench, "bare", 0)
    # The layout LightningModel resolves for this model on this device: both sides use it.
    channels_last = uses_channels_last(cfg.train.channels_last, cfg.model.norm, bench.device.type)
    torch.use_deterministic_algorithms(False)
    started = time.perf_counter()
    loaders = build_dataloaders(cfg)  # generates the synthetic set; the RAM cache is filled here
    data = Data(cfg, loaders, channels_last)
    print_setup(bench, data, time.perf_counter() - started)
    return data


def print_setup(bench: Bench, data: Data, ready_s: float) -> None:
    import lightning as L
    import torch

    args, cfg, loader = bench.args, data.cfg, data.loaders.train
    print(
        f"device={bench.device} torch={torch.__version__} lightning={L.__version__} "
        f"threads={torch.get_num_threads()} cpus={os.cpu_count()} "
        f"MALLOC_MMAP_MAX_={os.environ.get('MALLOC_MMAP_MAX_')}\n"
        f"model {cfg.model.encoder_residual_mode}:{cfg.model.merge_residual_mode} "
        f"{cfg.model.out_channels_layer1}ch x{cfg.model.number_of_layers} layers; "
        f"{args.image_size}x{args.image_size}, batch {args.batch_size}, {len(loader)} steps/epoch "
        f"({len(data.loaders.train_dataset)} images, cache on, {loader.num_workers} workers); "
        f"loss {cfg.train.loss_name}, AdamW lr={cfg.train.lr} wd={cfg.train.weight_decay}; "
        f"{args.epochs} epochs/variant/round (1st dropped), {args.rounds} rounds; "
        f"deterministic=False, precision=32-true, channels_last={data.channels_last} "
        f"(TRAIN_CONFIG: {cfg.train.channels_last}, norm {cfg.model.norm})\n"
        f"data ready in {ready_s:.1f} s; load average "
        f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}",
        flush=True,
    )


def run_bare(bench: Bench, data: Data) -> Measurement:
    """The bare PyTorch loop: ``--epochs`` epochs over the shared loader."""
    import torch
    from bench_norm import config_loss_step

    from skinet.checkpoints.state_dict import compile_model
    from skinet.models.unet2d import UNet2D

    cfg, device, channels_last = data.cfg, bench.device, data.channels_last
    torch.manual_seed(cfg.train.seed)
    model: torch.nn.Module = UNet2D(**cfg.model.model_dump())
    memory_format = torch.channels_last if channels_last else torch.preserve_format
    model = model.to(device, memory_format=memory_format)
    if cfg.train.use_torch_compile:
        model = compile_model(model, cfg.train.torch_compile_backend)
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=cfg.train.lr, weight_decay=cfg.train.weight_decay
    )
    # The loss the Lightning step trains: its weighting, and deep supervision where it is on.
    loss_step = config_loss_step(cfg)
    epoch_s, images_seen = [], []
    for _ in range(bench.args.epochs):
        model.train()
        sync(device)
        start = time.perf_counter()
        count = 0
        for images, masks in data.loaders.train:
            images = images.to(device, non_blocking=True)
            masks = masks.to(device, non_blocking=True)
            if channels_last:
                images = images.contiguous(memory_format=torch.channels_last)
            optimizer.zero_grad(set_to_none=True)
            loss_step(model, images, masks).backward()
            optimizer.step()
            count += images.shape[0]
        sync(device)
        epoch_s.append(time.perf_counter() - start)
        images_seen.append(count)
    return Measurement(epoch_s[1:], images_seen[1:])


def make_epoch_timer(device: Any) -> Any:
    """A Lightning callback recording epoch boundaries, batch-loop ends and validation time of
    a fit (CUDA-synchronised). Lightning is imported here, after the re-execution."""
    import lightning as L
    from lightning.pytorch.callbacks import Callback

    class EpochTimer(Callback):
        def __init__(self) -> None:
            self.starts: list[float] = []
            self.loop_ends: list[float] = []
            self.val_s: list[float] = []
            self.images: list[int] = []
            self.end = 0.0
            self._val_start = 0.0

        def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
            sync(device)
            self.starts.append(time.perf_counter())
            self.images.append(0)
            self.loop_ends.append(float("nan"))
            self.val_s.append(0.0)

        def on_validation_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
            sync(device)
            self._val_start = time.perf_counter()

        def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
            # Lightning runs ModelCheckpoint's hooks after every other callback's, so saving
            # checkpoints stays in the training time; EarlyStopping's check falls in here.
            sync(device)
            self.val_s[-1] += time.perf_counter() - self._val_start

        def on_train_batch_end(
            self, trainer: L.Trainer, pl_module: Any, outputs: Any, batch: Any, batch_idx: int
        ) -> None:
            self.images[-1] += int(batch[0].shape[0])
            if batch_idx == trainer.num_training_batches - 1:
                sync(device)
                self.loop_ends[-1] = time.perf_counter()

        def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
            sync(device)
            self.end = time.perf_counter()

    return EpochTimer()


def build_variant_trainer(bench: Bench, vcfg: Any, variant: str, run_dir: Path, timer: Any) -> Any:
    """SkiNet's ``build_trainer`` with its default callbacks, or the bare ``lightning-min``."""
    import lightning as L

    from skinet.runtime.devices import resolve_accelerator, resolve_train_settings
    from skinet.training.callbacks.setup import setup_logging_and_callbacks
    from skinet.training.run import build_trainer

    if variant != "lightning-min":
        run_name = vcfg.train.mlflow_config.run_name
        loggers, callbacks = setup_logging_and_callbacks(vcfg, run_dir, run_name)
        settings = resolve_train_settings(vcfg.train)
        return build_trainer(
            vcfg, settings, run_dir, loggers, [*callbacks, timer], deterministic=False
        )
    return L.Trainer(
        accelerator=resolve_accelerator(vcfg.train.accelerator),
        devices=1,
        precision="32-true",
        deterministic=False,
        max_epochs=bench.args.epochs,
        logger=False,
        callbacks=[timer],
        default_root_dir=run_dir,
        num_sanity_val_steps=0,
        limit_val_batches=1,  # ReduceLROnPlateau needs the validation metric
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )


def run_lightning(bench: Bench, data: Data, variant: str, round_index: int) -> Measurement:
    """One fit of a Lightning variant on the shared loaders, timed by the epoch timer."""
    import torch

    from skinet.training.lightning_model import LightningModel

    vcfg = make_config(bench, variant, round_index)
    run_dir = bench.root / "runs" / vcfg.train.mlflow_config.run_name
    run_dir.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(vcfg.train.seed)
    model = LightningModel(vcfg.to_yaml_dict())
    timer = make_epoch_timer(bench.device)
    trainer = build_variant_trainer(bench, vcfg, variant, run_dir, timer)
    sink = contextlib.nullcontext() if bench.args.show_fit_output else _discard_output()
    with sink:
        fit_start = time.perf_counter()
        trainer.fit(model, data.loaders.train, data.loaders.val)
        fit_s = time.perf_counter() - fit_start
    measurement = timed_fit(timer, fit_s, variant, bench.args.epochs)
    if model.channels_last != data.channels_last:  # the ratio would measure the layout
        raise RuntimeError(
            f"{variant} trained with channels_last={model.channels_last}, the bare loop "
            f"with {data.channels_last}"
        )
    return measurement


def timed_fit(timer: Any, fit_s: float, variant: str, epochs: int) -> Measurement:
    """The training epochs of one fit, validation time subtracted, the first epoch dropped."""
    bounds = [*timer.starts, timer.end]
    epoch_s = [b - a - v for a, b, v in zip(bounds, bounds[1:], timer.val_s, strict=False)]
    loop_s = [e - s for s, e in zip(timer.starts, timer.loop_ends, strict=True)]
    if len(epoch_s) != epochs:
        raise RuntimeError(f"{variant}: {len(epoch_s)} epochs ran, expected {epochs}")
    fixed_s = fit_s - sum(epoch_s) - sum(timer.val_s)
    return Measurement(epoch_s[1:], timer.images[1:], loop_s[1:], fixed_s)


def run_rounds(bench: Bench, data: Data) -> dict[str, list[Measurement]]:
    """Every variant once per round, the order rotated each round; one line per round."""
    results: dict[str, list[Measurement]] = {v: [] for v in ["bare", *bench.args.variants]}
    order = list(results)
    for round_index in range(1, bench.args.rounds + 1):
        # Rotating the order each round spreads position effects (the run right after another
        # variant was measurably slower) evenly over the variants.
        shift = (round_index - 1) % len(order)
        for variant in order[shift:] + order[:shift]:
            if variant == "bare":
                results[variant].append(run_bare(bench, data))
            else:
                results[variant].append(run_lightning(bench, data, variant, round_index))
        line = " | ".join(f"{v} {m[-1].images_per_sec:.2f}" for v, m in results.items())
        print(f"round {round_index}: images/s {line}", flush=True)
    return results


def print_table(results: dict[str, list[Measurement]]) -> None:
    """The markdown table: medians over rounds, ratios to the bare loop."""
    print(
        f"\nload average at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}\n"
        "\n| variant | median images/s | ratio to bare | per-round ratios "
        "| batch-loop ratio | epoch-end ms/epoch | fit fixed cost s |\n"
        "|---|---:|---:|---|---:|---:|---:|"
    )
    bare = statistics.median(m.images_per_sec for m in results["bare"])
    bare_loop = statistics.median(m.loop_images_per_sec for m in results["bare"])
    for variant, measurements in results.items():
        speed = statistics.median(m.images_per_sec for m in measurements)
        per_round = " ".join(
            f"{m.images_per_sec / b.images_per_sec:.3f}"
            for m, b in zip(measurements, results["bare"], strict=True)
        )
        loop = statistics.median(m.loop_images_per_sec for m in measurements) / bare_loop
        ends = [m.epoch_end_ms for m in measurements if m.epoch_end_ms is not None]
        fixed = [m.fit_fixed_s for m in measurements if m.fit_fixed_s is not None]
        print(
            f"| {variant} | {speed:.2f} | {speed / bare:.3f} | {per_round} | {loop:.3f} "
            f"| {f'{statistics.median(ends):.0f}' if ends else '-'} "
            f"| {f'{statistics.median(fixed):.2f}' if fixed else '-'} |"
        )


def print_verdicts(results: dict[str, list[Measurement]], variants: list[str]) -> None:
    """Each measured variant against the goals."""
    bare = statistics.median(m.images_per_sec for m in results["bare"])
    bare_loop = statistics.median(m.loop_images_per_sec for m in results["bare"])
    print(
        "\nbatch-loop ratio: first batch to last batch of each epoch only (per-step overhead);"
        "\nepoch-end work (checkpoints, epoch metrics, logger writes) weighs less in longer epochs."
        f"\ngoal: whole epochs ratio >= {GOAL:.2f} and batch loops ratio >= {LOOP_GOAL:.2f} "
        "(run --variants skinet --num-train 256 --epochs 2 --rounds 6)"
    )
    for variant in variants:
        ratio = statistics.median(m.images_per_sec for m in results[variant]) / bare
        loop = statistics.median(m.loop_images_per_sec for m in results[variant]) / bare_loop
        verdict = "met" if ratio >= GOAL and loop >= LOOP_GOAL else "NOT met"
        change = (
            f"{(1 - ratio) * 100:.1f}% slower" if ratio < 1 else f"{(ratio - 1) * 100:.1f}% faster"
        )
        print(f"  {variant}: {ratio:.3f} of bare ({change}), batch loops {loop:.3f} -> {verdict}")


def main() -> None:
    args = parse_args()
    reexec_with_malloc_env()
    import yaml

    for name in ("lightning", "lightning.pytorch", "lightning.fabric", "mlflow"):
        logging.getLogger(name).setLevel(logging.WARNING)  # "GPU available: ..." per Trainer

    tmp = tempfile.TemporaryDirectory(prefix="bench_framework_overhead_")
    base = yaml.safe_load(args.config.read_text()) if args.config else {}
    bench = Bench(args, resolve_device(args.device), Path(tmp.name), base)
    data = prepare_data(bench)
    results = run_rounds(bench, data)
    print_table(results)
    print_verdicts(results, args.variants)
    tmp.cleanup()


@contextlib.contextmanager
def _discard_output():
    """Send Python-level stdout/stderr of ``fit`` (model summary, progress bar, warnings) to
    /dev/null. The bar is still built and updated, but rich draws no live display off a
    terminal: ``--show-fit-output`` measures it as drawn in your terminal."""
    with (
        open(os.devnull, "w") as devnull,
        contextlib.redirect_stdout(devnull),
        contextlib.redirect_stderr(devnull),
    ):
        yield


if __name__ == "__main__":
    main()
