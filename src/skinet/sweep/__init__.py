"""Experiments over many runs: the Optuna grid sweep, multi-seed runs and the block ablation."""

from skinet.sweep.search_space import (
    build_search_space,
    build_trial_config,
    grid_points,
    scale_lr,
    trial_run_name,
    validate_search_space,
)
from skinet.sweep.study import (
    SweepResult,
    build_objective,
    default_storage_url,
    default_study_name,
    objective_overrides,
    parent_run_name,
    run_sweep,
)

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
    "validate_search_space",
]
