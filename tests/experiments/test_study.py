"""The study runner with a fake trainer: grid coverage, caps, failures, resume and workers."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import optuna
import pytest
import yaml
from optuna.trial import TrialState
from tests.helpers.sweep_fakes import FakeTrainer, one_epoch

from skinet.config.experiment import ExperimentConfig, parse_config
from skinet.experiments.grid import GRID_KEY_ATTR, SweepResult
from skinet.experiments.search_space import build_search_space, grid_points
from skinet.experiments.storage import build_storage
from skinet.experiments.study import open_study, run_sweep

WORKER = Path(__file__).parents[1] / "helpers" / "sweep_worker.py"


def _no_mlflow(raw: dict[str, Any], **sweep: list[Any]) -> dict[str, Any]:
    raw = one_epoch(raw, **sweep)
    raw["TRAIN_CONFIG"]["use_mlflow_logger"] = False
    return raw


def _sweep(raw: dict[str, Any], trainer: FakeTrainer, **kwargs: Any) -> Any:
    return run_sweep(
        parse_config(raw), heartbeat_interval=1, poll_s=0.1, run_training_fn=trainer, **kwargs
    )


def _complete_keys(storage: str, name: str) -> list[str]:
    study = optuna.load_study(study_name=name, storage=storage)
    return [t.user_attrs[GRID_KEY_ATTR] for t in study.get_trials(states=(TrialState.COMPLETE,))]


def test_grid_runs_every_point_once(tiny_raw: dict[str, Any], fake_trainer: FakeTrainer) -> None:
    raw = _no_mlflow(tiny_raw, lr=[1e-3, 2e-3], batch_size=[4, 8])
    result = _sweep(raw, fake_trainer)
    assert sorted(result.completed) == [0, 1, 2, 3] and not result.failed
    names = sorted(name for name, _ in fake_trainer.calls)
    assert names == [
        "trial_0_lr0.001_wd0.0_bs4_nw0_pf2_schednone",
        "trial_1_lr0.001_wd0.0_bs8_nw0_pf2_schednone",
        "trial_2_lr0.002_wd0.0_bs4_nw0_pf2_schednone",
        "trial_3_lr0.002_wd0.0_bs8_nw0_pf2_schednone",
    ]
    lrs = {name: cfg.train.lr for name, cfg in fake_trainer.calls}
    assert lrs["trial_3_lr0.002_wd0.0_bs8_nw0_pf2_schednone"] == pytest.approx(4e-3)  # scaled
    assert result.best_params == {**result.best_params, "lr": 2e-3, "batch_size": 8}
    assert result.best_value == pytest.approx(0.4)
    assert result.plot_path is not None and result.plot_path.stat().st_size > 0

    again = FakeTrainer()
    rerun = _sweep(raw, again)
    assert again.calls == [] and sorted(rerun.completed) == [0, 1, 2, 3]


def test_trials_caps_the_grid_and_a_later_run_tops_it_up(
    tiny_raw: dict[str, Any], fake_trainer: FakeTrainer
) -> None:
    raw = _no_mlflow(tiny_raw, lr=[1e-3, 2e-3], weight_decay=[0.0, 0.1])
    assert len(_sweep(raw, fake_trainer, n_trials=2).completed) == 2
    assert len(fake_trainer.calls) == 2
    more = FakeTrainer()
    assert len(_sweep(raw, more, n_trials=4).completed) == 4
    assert len(more.calls) == 2
    storage = f"sqlite:///{tmp_db(raw)}"
    keys = _complete_keys(storage, "tiny_val_best_dice_at_threshold")
    assert len(keys) == len(set(keys)) == 4


def tmp_db(raw: dict[str, Any]) -> Path:
    return Path(raw["TRAIN_CONFIG"]["output_dir"]).resolve() / "optuna.db"


def test_failing_point_is_recorded_and_the_sweep_goes_on(tiny_raw: dict[str, Any]) -> None:
    raw = _no_mlflow(tiny_raw, lr=[1e-3, 2e-3], weight_decay=[0.0, 0.5])
    result = _sweep(raw, FakeTrainer(failing_weight_decays=(0.5,)))
    assert sorted(result.completed) == [0, 2]
    assert sorted(result.failed) == [1, 3]
    assert "non-finite values in loss" in result.failed[1]
    assert not result.finished
    study = optuna.load_study(
        study_name="tiny_val_best_dice_at_threshold", storage=f"sqlite:///{tmp_db(raw)}"
    )
    failed = study.get_trials(states=(TrialState.FAIL,))
    assert all(t.user_attrs["error"].startswith("ValueError") for t in failed)


def test_a_restart_retries_only_the_failed_points(tiny_raw: dict[str, Any]) -> None:
    raw = _no_mlflow(tiny_raw, lr=[1e-3, 2e-3], weight_decay=[0.0, 0.5])
    _sweep(raw, FakeTrainer(failing_weight_decays=(0.5,)))
    kept = FakeTrainer(failing_weight_decays=(0.5,))
    assert sorted(_sweep(raw, kept, retry_failed=False).failed) == [1, 3]
    assert kept.calls == []
    retried = FakeTrainer()
    result = _sweep(raw, retried)
    assert sorted(name for name, _ in retried.calls) == [
        "trial_4_lr0.001_wd0.5_bs4_nw0_pf2_schednone",
        "trial_5_lr0.002_wd0.5_bs4_nw0_pf2_schednone",
    ]
    assert sorted(result.completed) == [0, 2, 4, 5] and not result.failed
    assert result.n_queued == 4 and result.finished
    assert sorted(result.failed_trials) == [1, 3]


def test_two_trials_of_one_point_train_it_once(tiny_raw: dict[str, Any]) -> None:
    """Two workers restarting together may both re-queue a failed point; one trial trains."""
    raw = _no_mlflow(tiny_raw, lr=[1e-3])
    cfg = parse_config(raw)
    _sweep(raw, FakeTrainer(failing_weight_decays=(0.0,)))
    storage = f"sqlite:///{tmp_db(raw)}"
    study = optuna.load_study(study_name="tiny_val_best_dice_at_threshold", storage=storage)
    [failed] = study.get_trials(states=(TrialState.FAIL,))
    for _ in range(2):  # what two restarting workers queue
        study.add_trial(
            optuna.trial.create_trial(
                state=TrialState.WAITING,
                user_attrs={GRID_KEY_ATTR: failed.user_attrs[GRID_KEY_ATTR]},
                system_attrs={"fixed_params": failed.params},
            )
        )
    trainer = FakeTrainer()
    result = run_sweep(cfg, heartbeat_interval=1, poll_s=0.1, run_training_fn=trainer)
    assert [name for name, _ in trainer.calls] == ["trial_1_lr0.001_wd0.0_bs4_nw0_pf2_schednone"]
    assert result.completed == [1] and not result.failed
    pruned = optuna.load_study(study_name=study.study_name, storage=storage).get_trials(
        states=(TrialState.PRUNED,)
    )
    assert [t.number for t in pruned] == [2]


def test_a_changed_grid_on_the_same_study_is_refused(
    tiny_raw: dict[str, Any], fake_trainer: FakeTrainer
) -> None:
    _sweep(_no_mlflow(tiny_raw, lr=[1e-3]), fake_trainer)
    with pytest.raises(ValueError, match="was created with the grid"):
        _sweep(_no_mlflow(tiny_raw, lr=[5e-3]), fake_trainer)


def _worker(config: Path, storage: str, seconds: float) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(["src", "."])}
    return subprocess.Popen(
        [sys.executable, str(WORKER), str(config), storage, str(seconds)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        cwd=Path(__file__).parents[2],
    )


def _resume(
    cfg: ExperimentConfig, storage: str, name: str, trainer: FakeTrainer, grace_period: int
) -> SweepResult:
    """Join study ``name`` as a restarted worker: 1-s heartbeats, quick polling."""
    return run_sweep(
        cfg,
        storage_url=storage,
        study_name=name,
        heartbeat_interval=1,
        grace_period=grace_period,
        poll_s=0.2,
        run_training_fn=trainer,
    )


@pytest.mark.process
def test_two_workers_share_the_grid(tiny_raw: dict[str, Any], tmp_path: Path) -> None:
    config = tmp_path / "grid.yaml"
    config.write_text(
        yaml.safe_dump(_no_mlflow(tiny_raw, lr=[1e-3, 2e-3], weight_decay=[0.0, 0.1]))
    )
    storage = f"sqlite:///{tmp_path / 'shared.db'}"
    workers = [_worker(config, storage, 0.3) for _ in range(2)]
    outputs = [w.communicate(timeout=120)[0] for w in workers]
    assert [w.returncode for w in workers] == [0, 0], "\n---\n".join(o[-3000:] for o in outputs)
    ran = [
        line.split()[1:] for out in outputs for line in out.splitlines() if line.startswith("RAN")
    ]
    names = [name for names in ran for name in names]
    assert len(names) == len(set(names)) == 4, outputs
    keys = _complete_keys(storage, "workers")
    assert len(keys) == len(set(keys)) == 4
    study = optuna.load_study(study_name="workers", storage=storage)
    assert study.user_attrs["grid_ready"] == 4


@pytest.mark.process
def test_killed_sweep_resumes_without_rerunning_finished_points(
    tiny_raw: dict[str, Any], tmp_path: Path
) -> None:
    raw = _no_mlflow(tiny_raw, lr=[1e-3, 2e-3, 3e-3])
    config = tmp_path / "grid.yaml"
    config.write_text(yaml.safe_dump(raw))
    storage = f"sqlite:///{tmp_path / 'killed.db'}"
    worker = _worker(config, storage, 1.5)
    deadline = time.monotonic() + 90
    complete: list[Any] = []
    while time.monotonic() < deadline and not complete:
        time.sleep(0.2)
        try:
            study = optuna.load_study(study_name="workers", storage=storage)
            complete = study.get_trials(states=(TrialState.COMPLETE,))
        except KeyError:
            continue  # the study does not exist yet
    worker.send_signal(signal.SIGKILL)
    worker.wait(timeout=30)
    assert complete, "the first trial never completed"
    first = complete[0].user_attrs[GRID_KEY_ATTR]

    resumed = FakeTrainer()
    result = _resume(parse_config(raw), storage, "workers", resumed, grace_period=2)
    keys = _complete_keys(storage, "workers")
    assert len(keys) == len(set(keys)) == 3
    assert first in keys
    rerun_lrs = sorted(cfg.train.lr for _, cfg in resumed.calls)
    assert len(rerun_lrs) == 2 and complete[0].params["lr"] not in rerun_lrs
    assert len(result.completed) == 3
    assert not result.failed and result.finished  # the killed point was retried: it counts once


def test_a_point_taken_by_a_worker_killed_before_its_first_heartbeat_is_retried(
    tiny_raw: dict[str, Any], tmp_path: Path
) -> None:
    raw = _no_mlflow(tiny_raw, lr=[1e-3, 2e-3])
    cfg = parse_config(raw)
    storage = f"sqlite:///{tmp_path / 'orphan.db'}"
    space = build_search_space(cfg.sweep)
    study, _ = open_study(
        cfg, build_storage(storage, 1, 1), "orphan", space, grid_points(space), lambda: None
    )
    # What a worker killed right after taking a point leaves: RUNNING, and no heartbeat yet.
    orphan = study.ask()
    assert GRID_KEY_ATTR in orphan.user_attrs

    resumed = FakeTrainer()
    results: list[Any] = []

    def sweep() -> None:
        results.append(_resume(cfg, storage, "orphan", resumed, grace_period=1))

    thread = threading.Thread(target=sweep, daemon=True)
    thread.start()
    thread.join(timeout=60)
    assert not thread.is_alive(), "the sweep waits for ever on a point nobody runs"
    (result,) = results
    assert sorted(cfg.train.lr for _, cfg in resumed.calls) == [1e-3, 2e-3]
    assert len(result.completed) == 2
    assert not result.failed and result.finished
    assert len(set(_complete_keys(storage, "orphan"))) == 2


def test_grid_plot_keeps_the_matplotlib_style(
    tiny_raw: dict[str, Any], fake_trainer: FakeTrainer
) -> None:
    import matplotlib as mpl
    from PIL import Image

    style = dict(mpl.rcParams)
    plot = _sweep(_no_mlflow(tiny_raw, lr=[1e-3, 2e-3]), fake_trainer).plot_path
    assert dict(mpl.rcParams) == style  # Optuna's ggplot style does not leak into later plots
    assert plot is not None and Image.open(plot).format == "PNG"
