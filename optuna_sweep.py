"""Optuna grid sweep: ``python optuna_sweep.py --config configs/main_config.yaml [--trials N]``."""

import sys

from skinet.cli import main

if __name__ == "__main__":
    sys.exit(main(["sweep", *sys.argv[1:]]))
