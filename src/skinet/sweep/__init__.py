"""Experiments over many runs: the Optuna grid sweep, multi-seed runs and the block ablation.

Names are imported lazily, so that building the ``skinet`` command line (which registers the
sweep subcommands) does not import Optuna or MLflow: ``skinet predict`` and training with
tracking off work without them.
"""

from __future__ import annotations

from skinet.lazy import lazy_getattr

_EXPORTS = {
    "SweepResult": "skinet.sweep.grid",
    "build_objective": "skinet.sweep.objective",
    "build_search_space": "skinet.sweep.search_space",
    "build_trial_config": "skinet.sweep.search_space",
    "default_storage_url": "skinet.sweep.storage",
    "default_study_name": "skinet.sweep.study",
    "grid_points": "skinet.sweep.search_space",
    "objective_overrides": "skinet.sweep.cli",
    "parent_run_name": "skinet.sweep.study",
    "run_sweep": "skinet.sweep.study",
    "scale_lr": "skinet.sweep.search_space",
    "trial_run_name": "skinet.sweep.search_space",
    "validate_grid": "skinet.sweep.objective",
    "validate_search_space": "skinet.sweep.search_space",
}

__all__ = sorted(_EXPORTS)

__getattr__ = lazy_getattr(__name__, _EXPORTS)
