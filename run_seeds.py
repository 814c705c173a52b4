"""One run per seed: ``python run_seeds.py --config main_config.yaml --seeds 42 200 300``."""

import sys

from skinet.cli import main

if __name__ == "__main__":
    sys.exit(main(["seeds", *sys.argv[1:]]))
