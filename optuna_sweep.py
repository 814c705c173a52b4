"""Optuna grid sweep: ``python optuna_sweep.py --config configs/main_config.yaml [--trials N]``."""

import sys

from skinet.__main__ import entry

if __name__ == "__main__":
    sys.exit(entry(["sweep"]))
