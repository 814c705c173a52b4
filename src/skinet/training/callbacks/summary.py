"""The model summary printed when a fit starts, and logged to MLflow, with the network's FLOPs
measured: one image of the run's size through the uncompiled network, forward.

Lightning counts FLOPs only over a module's ``example_input_array``. Without one its summary
prints a FLOPs column of zeros and ``Total FLOPs: 0``; with one set for good, every summary would
run the compiled network, which compiles it a second time at start-up (about 100 s with
inductor on a CPU). :func:`measuring_one_image` sets it only while a summary is made, with the
compiled network swapped for the one it wraps.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import lightning as L
import torch
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.utilities.model_summary import ModelSummary
from lightning.pytorch.utilities.model_summary.model_summary import (
    get_formatted_model_size,
    get_human_readable_count,
)

log = logging.getLogger(__name__)


@contextmanager
def measuring_one_image(pl_module: L.LightningModule) -> Iterator[bool]:
    """While inside, a Lightning summary of ``pl_module`` measures FLOPs and sizes for one image:
    its ``example_input_array`` is a ``(1, in_channels, image_size, image_size)`` image of the
    weights' dtype and its network the uncompiled one. Everything is put back on leaving, each
    module's train or eval mode too (a failed forward leaves Lightning's summary unrestored).

    Yields whether it set things up: not for a module without a SkiNet config, nor under a
    strategy that shards the network (FSDP, DeepSpeed), where a forward on one process would
    wait for the others."""
    cfg = getattr(pl_module, "cfg", None)
    network = getattr(pl_module, "model", None)
    if cfg is None or not isinstance(network, torch.nn.Module) or not _whole_here(pl_module):
        yield False
        return
    size = cfg.data.image_size
    dtype = next(network.parameters()).dtype  # 64-true, bf16-true: the weights' own
    example = pl_module.example_input_array
    modes = {module: module.training for module in pl_module.modules()}
    pl_module.model = getattr(network, "_orig_mod", network)  # torch.compile's wrapper
    pl_module.example_input_array = torch.zeros(1, cfg.model.in_channels, size, size, dtype=dtype)
    try:
        yield True
    finally:
        pl_module.model = network
        pl_module.example_input_array = example
        for module, training in modes.items():
            module.training = training


def _whole_here(pl_module: L.LightningModule) -> bool:
    """Whether this process holds the whole network: no Trainer yet, one device, or DDP (each
    process a replica)."""
    from lightning.pytorch.strategies import DDPStrategy, SingleDeviceStrategy

    trainer = getattr(pl_module, "_trainer", None)
    return trainer is None or isinstance(trainer.strategy, SingleDeviceStrategy | DDPStrategy)


def summarize_model(pl_module: L.LightningModule, max_depth: int = -1) -> str:
    """Lightning's summary table of ``pl_module``, FLOPs for one image (``model_summary.txt``)."""
    try:
        with measuring_one_image(pl_module) as measured:
            text = str(ModelSummary(pl_module, max_depth=max_depth))
    except Exception as error:  # noqa: BLE001 - a summary must not stop the run
        unmeasured = str(ModelSummary(pl_module, max_depth=max_depth))
        return f"FLOPs not measured: {type(error).__name__}: {error}\n{unmeasured}"
    return text if measured else f"FLOPs not measured (not a SkiNet network, or sharded)\n{text}"


class NetworkSummary(Callback):
    """At fit start, Lightning's model summary with the FLOPs, ``In sizes`` and ``Out sizes`` of
    one image through the network (:func:`measuring_one_image`), drawn on SkiNet's console (as
    wide as a log line in a file or a pipe) without the rows that hold nothing to count (the
    metrics: no parameters, no FLOPs). On the first process only."""

    def __init__(self, max_depth: int = 1) -> None:
        self.max_depth = max_depth

    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if not trainer.is_global_zero:
            return
        try:
            with measuring_one_image(pl_module) as measured:
                summary = ModelSummary(pl_module, max_depth=self.max_depth)
                columns = summary._get_summary_data()  # the In/Out sizes need the example
        except Exception as error:  # noqa: BLE001 - a summary must not stop the run
            log.warning("the model summary could not measure the network's FLOPs: %s", error)
            measured = False
            summary = ModelSummary(pl_module, max_depth=self.max_depth)
            columns = summary._get_summary_data()
        if not measured:
            columns = [column for column in columns if column[0] != "FLOPs"]
        draw_summary(columns, summary, summary.total_flops if measured else None)


def draw_summary(
    columns: list[tuple[str, list[str]]], summary: ModelSummary, flops: int | None
) -> None:
    """Print the summary's table (``columns``, Lightning's) and a line of its totals."""
    from rich.table import Table

    from skinet.runtime.console import console

    names = [name for name, _ in columns if name.strip()]  # not the row numbers
    cells_of = dict(columns)
    table = Table(header_style="bold magenta")
    for name in names:
        table.add_column(name, justify="left" if name in ("Name", "Type", "Mode") else "right")
    for row in zip(*(cells_of[name] for name in names), strict=True):
        cells = {name: cell.strip() for name, cell in zip(names, row, strict=True)}
        if cells["Params"] != "0" or cells.get("FLOPs", "0") != "0":
            table.add_row(*row)

    def count(number: Any) -> str:
        return get_human_readable_count(int(number)).strip()

    trainable = summary.trainable_parameters
    modes = summary.total_training_modes
    measured = "not measured" if flops is None else f"{count(flops)} for one image, forward"
    drawn = console()
    drawn.print(table)
    drawn.print(
        f"parameters: {count(trainable)} trainable, "
        f"{count(summary.total_parameters - trainable)} frozen, "
        f"{get_formatted_model_size(summary.model_size)} MB; "
        f"modules: {modes['train']} in train mode, {modes['eval']} in eval mode; "
        f"FLOPs: {measured}",
        highlight=False,
    )
