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
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
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


@dataclass(frozen=True)
class NetworkMeasure:
    """Lightning's summary of every layer, made once (:func:`measure_network`). Plain data: it
    keeps no reference to the module it measured."""

    columns: list[tuple[str, list[str]]]
    """Every layer's row: Lightning's ``(column name, cells)`` pairs, the sizes with them."""
    text: str
    """The summary as Lightning prints it (``model_summary.txt``)."""
    totals: str
    """One line of the totals: parameters, size, modules' modes and FLOPs for one image."""
    flops: int | None
    """FLOPs of one image through the network, forward; ``None``: not measured."""

    def columns_to_depth(self, depth: int) -> list[tuple[str, list[str]]]:
        """The rows of the modules at most ``depth`` levels down (``-1``: all, ``0``: none), as
        a summary of that ``max_depth`` has them; the FLOPs column only where measured."""
        names = dict(self.columns)["Name"]
        keep = [depth < 0 or name.count(".") < depth for name in names]
        return [
            (column, [cell for cell, kept in zip(cells, keep, strict=True) if kept])
            for column, cells in self.columns
            if self.flops is not None or column != "FLOPs"
        ]


_measures: weakref.WeakKeyDictionary[
    L.LightningModule, tuple[weakref.ref[L.Trainer], int, NetworkMeasure]
] = weakref.WeakKeyDictionary()
"""Each module's last measure, with the fit it was made in (its Trainer and step)."""


def measure_network(pl_module: L.LightningModule) -> NetworkMeasure:
    """Lightning's summary of every layer of ``pl_module``, FLOPs for one image
    (:func:`measuring_one_image`). Made once per fit: the printed summary and
    ``model_summary.txt`` read the same one, so the network runs one measured forward."""
    trainer: L.Trainer | None = getattr(pl_module, "_trainer", None)
    cached = _measures.get(pl_module)
    if trainer is not None and cached is not None:
        made_by, step, measure = cached
        if step == trainer.global_step and made_by() is trainer:
            return measure
    try:
        with measuring_one_image(pl_module) as measured:
            summary = ModelSummary(pl_module, max_depth=-1)
            columns, text = summary._get_summary_data(), str(summary)  # sizes need the image
        why = None if measured else "FLOPs not measured (not a SkiNet network, or sharded)"
    except Exception as error:  # noqa: BLE001 - a summary must not stop the run
        log.warning("the model summary could not measure the network's FLOPs: %s", error)
        measured, summary = False, ModelSummary(pl_module, max_depth=-1)
        columns, text = summary._get_summary_data(), str(summary)
        why = f"FLOPs not measured: {type(error).__name__}: {error}"
    flops = summary.total_flops if measured else None
    measure = NetworkMeasure(
        columns=columns,
        text=text if why is None else f"{why}\n{text}",
        totals=_totals(summary, flops),
        flops=flops,
    )
    if trainer is not None:
        _measures[pl_module] = (weakref.ref(trainer), trainer.global_step, measure)
    return measure


def _totals(summary: ModelSummary, flops: int | None) -> str:
    def count(number: Any) -> str:
        return get_human_readable_count(int(number)).strip()

    trainable = summary.trainable_parameters
    modes = summary.total_training_modes
    measured = "not measured" if flops is None else f"{count(flops)} for one image, forward"
    return (
        f"parameters: {count(trainable)} trainable, "
        f"{count(summary.total_parameters - trainable)} frozen, "
        f"{get_formatted_model_size(summary.model_size)} MB; "
        f"modules: {modes['train']} in train mode, {modes['eval']} in eval mode; "
        f"FLOPs: {measured}"
    )


def summarize_model(pl_module: L.LightningModule) -> str:
    """Lightning's summary table of every layer of ``pl_module``, FLOPs for one image
    (``model_summary.txt``)."""
    return measure_network(pl_module).text


class NetworkSummary(Callback):
    """At fit start, Lightning's model summary with the FLOPs, ``In sizes`` and ``Out sizes`` of
    one image through the network (:func:`measuring_one_image`), drawn on SkiNet's console (as
    wide as a log line in a file or a pipe) to ``max_depth`` without the rows that hold nothing
    to count (the metrics: no parameters, no FLOPs). On the first process only."""

    def __init__(self, max_depth: int = 1) -> None:
        self.max_depth = max_depth

    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if not trainer.is_global_zero:
            return
        measure = measure_network(pl_module)
        draw_summary(measure.columns_to_depth(self.max_depth), measure.totals)


def draw_summary(columns: list[tuple[str, list[str]]], totals: str) -> None:
    """Print the summary's table (``columns``, Lightning's) and the line of its ``totals``."""
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
    drawn = console()
    drawn.print(table)
    drawn.print(totals, highlight=False)
