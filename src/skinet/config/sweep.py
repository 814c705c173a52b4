"""``SWEEP_CONFIG``: the Optuna grid and the single source of the monitored metric."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from skinet.config.base import Section
from skinet.keys import MetricsKey

SchedulerChoice = Literal["none", "reduce_on_plateau", "cosine_annealing", "cosine_budget"]


class SweepConfig(Section):
    """Grid candidates per :class:`skinet.keys.HyperparamKey` member, plus the objective.

    Every list defaults to one value, so the default grid is a 1-combo no-op sweep.
    """

    lr: list[float] = Field(default_factory=lambda: [3e-4], min_length=1)
    """Learning rates at the smallest batch size of the sweep."""
    weight_decay: list[float] = Field(default_factory=lambda: [0.0], min_length=1)
    """L2 regularisation strengths."""
    batch_size: list[int] = Field(default_factory=lambda: [8], min_length=1)
    """Batch sizes; ``lr`` is rescaled by ``batch_size / min(batch_size)``."""
    num_workers: list[int] = Field(default_factory=lambda: [2], min_length=1)
    """DataLoader worker counts."""
    prefetch_factor: list[int] = Field(default_factory=lambda: [4], min_length=1)
    """Batches pre-loaded per worker."""
    scheduler_type: list[SchedulerChoice] = Field(
        default_factory=lambda: list[SchedulerChoice](["none"]), min_length=1
    )
    """LR schedulers; ``"none"`` sets ``use_lr_scheduler: false``."""
    monitor: str = MetricsKey.default_monitor().value
    """Metric optimised by the sweep and monitored by early stopping, checkpoints and LR plateau."""
    direction: Literal["maximize", "minimize"] = "maximize"
    """Whether a larger ``monitor`` is better."""

    @field_validator("monitor")
    @classmethod
    def _known_monitor(cls, value: str) -> str:
        allowed = MetricsKey.monitorable()
        if value not in allowed:
            raise ValueError(f"unknown metric {value!r}; choose one of {allowed}")
        return value

    @property
    def mode(self) -> Literal["max", "min"]:
        """Lightning's ``mode`` for callbacks monitoring this metric."""
        return "max" if self.direction == "maximize" else "min"
