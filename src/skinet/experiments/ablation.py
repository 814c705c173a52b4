"""Block ablation: train every encoder x merge residual-mode combination and tabulate it."""

from __future__ import annotations

import logging
import secrets
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, get_args

from skinet.config.errors import UsageError
from skinet.config.experiment import ExperimentConfig
from skinet.config.model import EncoderResidualMode, MergeResidualMode
from skinet.experiments.mlflow_parent import start_group_run
from skinet.experiments.search_space import config_with_overrides
from skinet.experiments.summary import markdown_table, print_table, write_csv
from skinet.keys import MetricsKey
from skinet.tracking import runs as tracking_runs
from skinet.tracking.mlflow_utils import resolve_tracking_uri

log = logging.getLogger(__name__)

ENCODER_MODES: tuple[str, ...] = get_args(EncoderResidualMode)
MERGE_MODES: tuple[str, ...] = get_args(MergeResidualMode)


@dataclass
class AblationResult:
    """The results table and where it was written."""

    rows: list[dict[str, Any]]
    folder: Path
    csv_path: Path
    markdown_path: Path
    parent_run_id: str | None


def check_modes(encoder_modes: Sequence[str], merge_modes: Sequence[str]) -> None:
    """Raise ``UsageError`` naming an unknown mode and the allowed ones."""
    for flag, given, allowed in (
        ("--encoder-modes", encoder_modes, ENCODER_MODES),
        ("--merge-modes", merge_modes, MERGE_MODES),
    ):
        unknown = [m for m in given if m not in allowed]
        if unknown:
            raise UsageError(f"{flag}: unknown mode(s) {unknown}; choose from {list(allowed)}")
        if not given:
            raise UsageError(f"{flag} needs at least one mode")


def make_ablation_folder(output_dir: Path) -> Path:
    """A new ``ablation_{YYYYmmdd-HHMMSS-ffffff}_{random}`` folder; never one that exists."""
    output_dir.mkdir(parents=True, exist_ok=True)
    while True:
        stamp = datetime.now().strftime("%Y%m%d-%H%M%S-%f")
        folder = output_dir / f"ablation_{stamp}_{secrets.token_hex(3)}"
        try:
            folder.mkdir()
        except FileExistsError:
            continue
        return folder


def count_model_parameters(cfg: ExperimentConfig) -> int:
    """Parameters of the UNet2D that ``MODEL_CONFIG`` builds, as prediction runs it (without
    the training-only deep-supervision heads)."""
    from skinet.checkpoints.state_dict import count_parameters
    from skinet.models.unet2d import inference_unet

    return count_parameters(inference_unet(cfg.model))


def run_ablation(
    cfg: ExperimentConfig,
    encoder_modes: Sequence[str] | None = None,
    merge_modes: Sequence[str] | None = None,
    run_training_fn: Callable[..., Any] | None = None,
) -> AblationResult:
    """Train every (encoder, merge) combination and write the results table.

    Runs go to a new ``<output_dir>/ablation_{timestamp}_{suffix}/`` with
    ``ablation_results.csv`` and ``.md`` (encoder, merge, params, monitor value, test Dice/IoU,
    seconds per epoch); in MLflow they are child runs ``ablation_enc{e}_merge{m}`` of
    ``ablation_{experiment_name}``, which holds the table as artifacts.

    Args:
        cfg: The base config.
        encoder_modes: Default: every ``EncoderResidualMode``.
        merge_modes: Default: every ``MergeResidualMode``.
        run_training_fn: Replaces :func:`skinet.training.run.run_training` (tests).
    """
    encoder_modes = list(encoder_modes or ENCODER_MODES)
    merge_modes = list(merge_modes or MERGE_MODES)
    check_modes(encoder_modes, merge_modes)
    if run_training_fn is None:
        from skinet.training.run import run_training

        run_training_fn = run_training
    folder = make_ablation_folder(Path(cfg.train.output_dir))
    # Child runs write their folders here, but keep the experiment's MLflow store.
    pinned = {"TRAIN_CONFIG.output_dir": str(folder)}
    if cfg.train.use_mlflow_logger:
        uri = resolve_tracking_uri(cfg)
        pinned["TRAIN_CONFIG.mlflow_config.tracking_uri"] = uri
    parent_run_id = start_group_run(
        cfg, f"ablation_{cfg.train.experiment_name}", {"skinet.kind": "ablation"}, reuse=False
    )
    try:
        rows = _train_combinations(
            cfg, encoder_modes, merge_modes, pinned, parent_run_id, run_training_fn
        )
    except BaseException:
        if parent_run_id is not None:
            tracking_runs.finish_run(resolve_tracking_uri(cfg), parent_run_id, "FAILED")
        raise
    csv_path = write_csv(folder / "ablation_results.csv", rows)
    markdown_path = folder / "ablation_results.md"
    title = f"Ablation of {cfg.train.experiment_name}: encoder x merge residual modes"
    markdown_path.write_text(f"# {title}\n\n{markdown_table(rows)}")
    print_table(title, rows)
    if parent_run_id is not None:
        uri = resolve_tracking_uri(cfg)
        tracking_runs.log_params(
            uri,
            parent_run_id,
            {"encoder_modes": " ".join(encoder_modes), "merge_modes": " ".join(merge_modes)},
        )
        tracking_runs.log_artifact(uri, parent_run_id, csv_path)
        tracking_runs.log_artifact(uri, parent_run_id, markdown_path)
        tracking_runs.log_table(uri, parent_run_id, rows, "ablation_results_table.json")
        tracking_runs.finish_run(uri, parent_run_id)
    return AblationResult(rows, folder, csv_path, markdown_path, parent_run_id)


def _train_combinations(
    cfg: ExperimentConfig,
    encoder_modes: Sequence[str],
    merge_modes: Sequence[str],
    pinned: dict[str, Any],
    parent_run_id: str | None,
    run_training_fn: Callable[..., Any],
) -> list[dict[str, Any]]:
    monitor = cfg.sweep.monitor
    rows: list[dict[str, Any]] = []
    for encoder in encoder_modes:
        for merge in merge_modes:
            run_cfg = config_with_overrides(
                cfg,
                {
                    **pinned,
                    "MODEL_CONFIG.encoder_residual_mode": encoder,
                    "MODEL_CONFIG.merge_residual_mode": merge,
                },
                f"ablation {encoder} x {merge}",
            )
            log.info("ablation: encoder %s, merge %s", encoder, merge)
            result = run_training_fn(
                run_cfg,
                visualize=False,
                parent_run_id=parent_run_id,
                run_name=f"ablation_enc{encoder}_merge{merge}",
            )
            rows.append(
                {
                    "encoder": encoder,
                    "merge": merge,
                    "params": count_model_parameters(run_cfg),
                    monitor: result.metrics.get(monitor),
                    "test_dice": result.metrics.get(MetricsKey.TEST_DICE.value),
                    "test_iou": result.metrics.get(MetricsKey.TEST_IOU.value),
                    "sec_per_epoch": round(result.fit_seconds / max(result.epochs_trained, 1), 3),
                }
            )

    return rows
