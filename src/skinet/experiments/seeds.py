"""Multi-seed training: one run per ``TRAIN_CONFIG.seed`` and a mean/std summary."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from skinet.config.errors import UsageError
from skinet.config.experiment import ExperimentConfig
from skinet.experiments.mlflow_parent import start_group_run
from skinet.experiments.search_space import config_with_overrides
from skinet.experiments.summary import markdown_table, print_table, summarize_runs, write_json
from skinet.tracking import runs as tracking_runs
from skinet.tracking.mlflow_utils import resolve_tracking_uri

log = logging.getLogger(__name__)


@dataclass
class SeedsSummary:
    """Per-seed metrics and their mean and standard deviation."""

    monitor: str
    seeds: list[int]
    per_seed: dict[int, dict[str, float]]
    mean: dict[str, float]
    std: dict[str, float]
    run_ids: dict[int, str | None]
    run_dirs: dict[int, Path] = field(default_factory=dict)
    json_path: Path | None = None
    markdown_path: Path | None = None
    summary_run_id: str | None = None

    def rows(self) -> list[dict[str, Any]]:
        """One row per metric: mean, std and the value of every seed."""
        return [
            {
                "metric": name,
                "mean": self.mean[name],
                "std": self.std[name],
                **{f"seed {seed}": self.per_seed[seed].get(name) for seed in self.seeds},
            }
            for name in self.mean
        ]


def run_seeds(
    cfg: ExperimentConfig,
    seeds: Sequence[int],
    run_training_fn: Callable[..., Any] | None = None,
) -> SeedsSummary:
    """Train ``cfg`` once per seed, then summarise, print, write and log the results.

    Each seed is an independent MLflow run (``{experiment_name}_seed{seed}_{timestamp}``) of
    the config's experiment; the summary is a separate run ``seeds_summary_{experiment_name}``
    with ``{metric}_mean``/``{metric}_std`` metrics and the table as artifacts. The files go to
    ``<output_dir>/seeds_summary_{timestamp}.json`` and ``.md``.
    """
    if not seeds:
        raise UsageError("--seeds needs at least one seed")
    if len(set(seeds)) != len(seeds):
        raise UsageError(f"--seeds has duplicates: {list(seeds)}")
    if run_training_fn is None:
        from skinet.training.run import run_training

        run_training_fn = run_training
    per_seed: dict[int, dict[str, float]] = {}
    run_ids: dict[int, str | None] = {}
    run_dirs: dict[int, Path] = {}
    for seed in seeds:
        seed_cfg = config_with_overrides(cfg, {"TRAIN_CONFIG.seed": seed}, f"seed {seed}")
        log.info("seed %d (%d of %d)", seed, len(per_seed) + 1, len(seeds))
        result = run_training_fn(seed_cfg, visualize=False)
        per_seed[seed] = dict(result.metrics)
        run_ids[seed] = result.mlflow_run_id
        run_dirs[seed] = Path(result.run_dir)

    monitor = cfg.sweep.monitor
    mean, std = summarize_runs(monitor, per_seed)
    summary = SeedsSummary(monitor, list(seeds), per_seed, mean, std, run_ids, run_dirs)
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    out = Path(cfg.train.output_dir)
    title = f"{cfg.train.experiment_name}: {len(seeds)} seeds"
    summary.json_path = write_json(
        out / f"seeds_summary_{stamp}.json",
        {
            "experiment_name": cfg.train.experiment_name,
            "monitor": monitor,
            "seeds": list(seeds),
            "mean": mean,
            "std": std,
            "per_seed": {str(s): m for s, m in per_seed.items()},
            "mlflow_run_ids": {str(s): r for s, r in run_ids.items()},
            "run_dirs": {str(s): str(d) for s, d in run_dirs.items()},
        },
    )
    summary.markdown_path = out / f"seeds_summary_{stamp}.md"
    summary.markdown_path.write_text(f"# {title}\n\n{markdown_table(summary.rows())}")
    print_table(title, summary.rows())
    summary.summary_run_id = _log_summary_run(cfg, summary)
    return summary


def _log_summary_run(cfg: ExperimentConfig, summary: SeedsSummary) -> str | None:
    run_id = start_group_run(
        cfg,
        f"seeds_summary_{cfg.train.experiment_name}",
        {"skinet.kind": "seeds_summary"},
        reuse=False,
    )
    if run_id is None:
        return None
    uri = resolve_tracking_uri(cfg)
    tracking_runs.log_params(
        uri, run_id, {"seeds": " ".join(map(str, summary.seeds)), "monitor": summary.monitor}
    )
    metrics = {f"{k}_mean": v for k, v in summary.mean.items()}
    metrics.update({f"{k}_std": v for k, v in summary.std.items()})
    tracking_runs.log_metrics(uri, run_id, metrics)
    tracking_runs.set_tags(
        uri,
        run_id,
        {f"skinet.seed_run.{seed}": str(rid) for seed, rid in summary.run_ids.items() if rid},
    )
    tracking_runs.log_table(uri, run_id, summary.rows(), "seeds_summary_table.json")
    for path in (summary.json_path, summary.markdown_path):
        if path is not None:
            tracking_runs.log_artifact(uri, run_id, path)
    tracking_runs.finish_run(uri, run_id)
    return run_id
