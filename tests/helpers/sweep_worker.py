"""One sweep worker process with a fake trainer: ``sweep_worker.py CONFIG STORAGE SECONDS``.

Used by the multi-worker and kill/resume tests; each trial sleeps SECONDS instead of training.
"""

from __future__ import annotations

import sys

from tests.helpers.sweep_fakes import FakeTrainer

from skinet.config.experiment import load_config
from skinet.experiments.study import run_sweep

if __name__ == "__main__":
    config, storage, seconds = sys.argv[1], sys.argv[2], float(sys.argv[3])
    trainer = FakeTrainer(seconds)
    run_sweep(
        load_config(config),
        storage_url=storage,
        study_name="workers",
        heartbeat_interval=1,
        grace_period=2,
        poll_s=0.2,
        run_training_fn=trainer,
    )
    print("RAN", " ".join(name for name, _ in trainer.calls), flush=True)
