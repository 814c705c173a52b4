"""The study-level plot of a sweep: its objective against each grid parameter."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import optuna

from skinet.experiments.search_space import SearchSpace


def plot_grid(study: optuna.Study, search_space: SearchSpace, monitor: str, path: Path) -> Path:
    """A PNG with one panel per grid parameter: the monitored value of every completed trial.

    Uses Optuna's ``plot_slice``; only parameters with more than one value get a panel (all of
    them when the grid is a single point). Failed trials have no value and are left out.
    """
    import matplotlib.pyplot as plt
    from optuna.visualization.matplotlib import plot_slice

    varied = [name for name, values in search_space.items() if len(values) > 1]
    # Optuna switches the global matplotlib style to ggplot; rc_context restores it afterwards.
    with plt.rc_context(), warnings.catch_warnings():
        # plot_slice is experimental and warns when no trial has completed yet.
        warnings.simplefilter("ignore")
        axes = plot_slice(study, params=varied or list(search_space), target_name=monitor)
        first = axes.flat[0] if isinstance(axes, np.ndarray) else axes
        fig = first.get_figure(root=True)
        if fig is None:
            raise RuntimeError("plot_slice returned axes without a figure")
        fig.suptitle(f"Optuna grid sweep {study.study_name}: {monitor} per parameter")
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, dpi=110, bbox_inches="tight")
        plt.close(fig)
    return path
