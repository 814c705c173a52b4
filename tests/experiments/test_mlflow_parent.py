"""Real sweeps on the synthetic data with a real MLflow SQLite store."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import optuna
import pytest
import yaml
from mlflow.tracking import MlflowClient
from mlflow.utils.mlflow_tags import MLFLOW_PARENT_RUN_ID
from optuna.trial import TrialState
from tests.helpers.sweep_fakes import one_epoch

from skinet.cli.main import main
from skinet.config.experiment import parse_config
from skinet.experiments.study import run_sweep
from skinet.tracking import runs as tracking_runs

ROOT = Path(__file__).parents[2]


def _runs(raw: dict[str, Any]) -> tuple[MlflowClient, list[Any]]:
    db = Path(raw["TRAIN_CONFIG"]["output_dir"]).resolve() / "mlflow.db"
    client = MlflowClient(f"sqlite:///{db}")
    experiment = client.get_experiment_by_name("tiny")
    return client, client.search_runs([experiment.experiment_id], max_results=100)


def test_tag_constants_match_mlflow() -> None:
    assert tracking_runs.PARENT_RUN_ID_TAG == MLFLOW_PARENT_RUN_ID


@pytest.mark.heavy
def test_grid_2x2_nests_four_named_child_runs(tiny_raw: dict[str, Any], tmp_path: Path) -> None:
    raw = one_epoch(tiny_raw, lr=[1e-3, 2e-3], weight_decay=[0.0, 0.01])
    config = tmp_path / "sweep.yaml"
    config.write_text(yaml.safe_dump(raw))
    argv = ["sweep", "--config", str(config), "--heartbeat-interval", "5"]
    assert main(argv) == 0

    client, runs = _runs(raw)
    parents = [r for r in runs if r.info.run_name == "optuna_study_tiny_val_best_dice_at_threshold"]
    assert len(parents) == 1
    parent = parents[0]
    children = [r for r in runs if r.data.tags.get(MLFLOW_PARENT_RUN_ID) == parent.info.run_id]
    assert sorted(r.info.run_name for r in children) == [
        "trial_0_lr0.001_wd0.0_bs4_nw0_pf2_schednone",
        "trial_1_lr0.001_wd0.01_bs4_nw0_pf2_schednone",
        "trial_2_lr0.002_wd0.0_bs4_nw0_pf2_schednone",
        "trial_3_lr0.002_wd0.01_bs4_nw0_pf2_schednone",
    ]
    assert all(r.info.status == "FINISHED" for r in children)
    assert parent.info.status == "FINISHED"
    best_value = max(r.data.metrics["val_best_dice_at_threshold"] for r in children)
    best_child = next(
        r for r in children if r.data.metrics["val_best_dice_at_threshold"] == best_value
    )
    params = parent.data.params
    assert float(params["best_lr"]) == float(best_child.data.params["TRAIN_CONFIG/lr"])
    assert {f"best_{k}" for k in ("weight_decay", "batch_size", "scheduler_type")} <= set(params)
    assert parent.data.metrics["best_val_best_dice_at_threshold"] == pytest.approx(best_value)
    artifacts = [a.path for a in client.list_artifacts(parent.info.run_id, "plots")]
    assert artifacts == ["plots/objective_per_trial.png"]

    # A second run of the same sweep reuses the parent run and trains nothing.
    assert main(argv) == 0
    _, again = _runs(raw)
    assert len(again) == len(runs)


@pytest.mark.slow
def test_diverging_lr_fails_its_trial_with_the_error(tiny_raw: dict[str, Any]) -> None:
    raw = one_epoch(tiny_raw, lr=[1e-3, 1e12])
    raw["TRAIN_CONFIG"]["gradient_clip_val"] = None
    result = run_sweep(parse_config(raw), heartbeat_interval=5)
    assert result.completed == [0]
    assert list(result.failed) == [1]
    assert "finite" in result.failed[1].lower() or "nan" in result.failed[1].lower()
    _, runs = _runs(raw)
    statuses = {r.info.run_name: r.info.status for r in runs}
    assert statuses["trial_1_lr1000000000000.0_wd0.0_bs4_nw0_pf2_schednone"] == "FAILED"


@pytest.mark.process
@pytest.mark.slow
def test_two_cli_workers_share_a_real_grid(tiny_raw: dict[str, Any], tmp_path: Path) -> None:
    raw = one_epoch(tiny_raw, lr=[1e-3, 2e-3], weight_decay=[0.0, 0.01])
    config = tmp_path / "sweep.yaml"
    config.write_text(yaml.safe_dump(raw))
    storage = f"sqlite:///{tmp_path / 'optuna_shared.db'}"
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    command = [
        sys.executable,
        str(ROOT / "optuna_sweep.py"),
        "--config",
        str(config),
        "--storage",
        storage,
        "--study-name",
        "shared",
        "--heartbeat-interval",
        "2",
    ]
    workers = [
        subprocess.Popen(
            command,
            env=env,
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for _ in range(2)
    ]
    outputs = [w.communicate(timeout=600)[0] for w in workers]
    assert [w.returncode for w in workers] == [0, 0], outputs[0][-3000:]
    study = optuna.load_study(study_name="shared", storage=storage)
    complete = study.get_trials(states=(TrialState.COMPLETE,))
    assert len(complete) == 4
    assert len({tuple(sorted(t.params.items())) for t in complete}) == 4
    _, runs = _runs(raw)
    parents = [r for r in runs if r.info.run_name.startswith("optuna_study_")]
    assert len(parents) == 1
    children = [r for r in runs if r.data.tags.get(MLFLOW_PARENT_RUN_ID) == parents[0].info.run_id]
    assert len(children) == 4
