"""One run per seed: ``python run_seeds.py --config main_config.yaml --seeds 42 200 300``."""

import sys

from skinet.__main__ import entry

if __name__ == "__main__":
    sys.exit(entry(["seeds"]))
