"""Workers that share one SQLite file take each waiting trial exactly once.

SQLite ignores ``SELECT ... FOR UPDATE``: without a write lock taken at the start of each
transaction, two workers can both read a trial as waiting and both start it.
"""

from __future__ import annotations

import threading
from pathlib import Path

import optuna
from optuna.trial import TrialState

from skinet.experiments.storage import build_storage


def test_each_waiting_trial_is_taken_by_one_worker(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'shared.db'}"
    study = optuna.create_study(storage=build_storage(url), study_name="race")
    trial_ids = []
    for _ in range(30):
        study.add_trial(optuna.trial.create_trial(state=TrialState.WAITING))
    trial_ids = [t._trial_id for t in study.get_trials(deepcopy=False)]
    workers = [build_storage(url) for _ in range(4)]  # one engine each, as separate processes
    taken: dict[int, list[int]] = {trial_id: [] for trial_id in trial_ids}

    def take(worker: int, barrier: threading.Barrier) -> None:
        for trial_id in trial_ids:
            barrier.wait()
            if workers[worker].set_trial_state_values(trial_id, TrialState.RUNNING):
                taken[trial_id].append(worker)

    barrier = threading.Barrier(len(workers))
    threads = [threading.Thread(target=take, args=(i, barrier)) for i in range(len(workers))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert {trial_id: len(who) for trial_id, who in taken.items()} == dict.fromkeys(trial_ids, 1)
