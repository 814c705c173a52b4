"""The objective's bookkeeping around a trial: earlier unfinished attempts of its grid point."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import optuna
from optuna.distributions import CategoricalDistribution
from optuna.trial import TrialState, create_trial
from tests.helpers.sweep_fakes import one_epoch

from skinet.config.experiment import parse_config
from skinet.experiments.grid import GRID_KEY_ATTR
from skinet.experiments.objective import mark_earlier_attempts
from skinet.experiments.search_space import build_search_space, grid_points, trial_run_name
from skinet.training.records import METRICS_FILE


def _attempt(study: optuna.Study, params: dict[str, Any], key: str, **attrs: Any) -> int:
    distributions = {name: CategoricalDistribution([value]) for name, value in params.items()}
    study.add_trial(
        create_trial(
            state=TrialState.FAIL,
            params=params,
            distributions=distributions,
            user_attrs={GRID_KEY_ATTR: key, **attrs},
        )
    )
    return study.trials[-1].number


def _folder(output: Path, number: int, params: dict[str, Any], finished: bool) -> Path:
    folder = output / trial_run_name(number, params)
    (folder / "checkpoints").mkdir(parents=True)
    (folder / "config.yaml").write_text("TRAIN_CONFIG: {}\n")
    if finished:
        (folder / METRICS_FILE).write_text("{}")
    return folder


def test_unfinished_attempts_of_the_point_are_renamed_not_left_beside_the_retry(
    tiny_raw: dict[str, Any], tmp_path: Path
) -> None:
    cfg = parse_config(one_epoch(tiny_raw))
    [params] = grid_points(build_search_space(cfg.sweep))
    key = "the point"
    study = optuna.create_study()
    killed = _attempt(study, params, key)  # the worker died: no error recorded
    failed = _attempt(study, params, key, error="ValueError: val_loss is nan")
    other_point = _attempt(study, params, "another point")
    output = Path(cfg.train.output_dir)
    folders = {n: _folder(output, n, params, finished=False) for n in (killed, other_point)}
    folders[failed] = _folder(output, failed, params, finished=True)  # it wrote its metrics

    renamed = mark_earlier_attempts(study, 3, key, params, cfg)

    assert renamed == [folders[killed].with_name(folders[killed].name + ".killed")]
    assert (renamed[0] / "config.yaml").is_file()  # kept for inspection, under another name
    assert not folders[killed].exists()
    assert folders[failed].is_dir()  # finished: left as it is
    assert folders[other_point].is_dir()  # another point's attempt is not this trial's business
    fresh = _attempt(study, params, key, error="RuntimeError: boom")
    folder = _folder(output, fresh, params, finished=False)
    assert mark_earlier_attempts(study, fresh + 1, key, params, cfg) == [
        folder.with_name(folder.name + ".failed")
    ]
