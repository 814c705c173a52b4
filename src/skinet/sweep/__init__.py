"""Experiments over many runs: the Optuna grid sweep, multi-seed runs and the block ablation."""

from skinet.sweep.cli import objective_overrides
from skinet.sweep.grid import SweepResult
from skinet.sweep.objective import build_objective, validate_grid
from skinet.sweep.search_space import (
    build_search_space,
    build_trial_config,
    grid_points,
    scale_lr,
    trial_run_name,
    validate_search_space,
)
from skinet.sweep.storage import default_storage_url
from skinet.sweep.study import default_study_name, parent_run_name, run_sweep

__all__ = [
    "SweepResult",
    "build_objective",
    "build_search_space",
    "build_trial_config",
    "default_storage_url",
    "default_study_name",
    "grid_points",
    "objective_overrides",
    "parent_run_name",
    "run_sweep",
    "scale_lr",
    "trial_run_name",
    "validate_grid",
    "validate_search_space",
]
