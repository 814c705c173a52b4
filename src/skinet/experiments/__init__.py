"""Experiments over many runs: the Optuna grid sweep, multi-seed runs, cross-validation and the
block ablation.

The names in ``__all__`` import from here; each loads its submodule on first use, so importing the
package alone stays light.
"""

from typing import TYPE_CHECKING

from skinet._lazy import lazy_exports

__all__ = [
    "run_sweep",
    "SweepResult",
    "build_objective",
    "validate_search_space",
    "build_search_space",
    "scale_lr",
    "SeedsSummary",
    "run_seeds",
    "CvResult",
    "run_cv",
    "AblationResult",
    "run_ablation",
]

if TYPE_CHECKING:
    from skinet.experiments.ablation import AblationResult, run_ablation
    from skinet.experiments.cv import CvResult, run_cv
    from skinet.experiments.grid import SweepResult
    from skinet.experiments.objective import build_objective
    from skinet.experiments.search_space import build_search_space, scale_lr, validate_search_space
    from skinet.experiments.seeds import SeedsSummary, run_seeds
    from skinet.experiments.study import run_sweep
else:
    __getattr__, __dir__ = lazy_exports(
        __name__,
        __all__,
        {
            "study": ("run_sweep",),
            "grid": ("SweepResult",),
            "objective": ("build_objective",),
            "search_space": ("validate_search_space", "build_search_space", "scale_lr"),
            "seeds": ("SeedsSummary", "run_seeds"),
            "cv": ("CvResult", "run_cv"),
            "ablation": ("AblationResult", "run_ablation"),
        },
    )
