"""Train, validate and test one model: ``python main_run.py --config configs/main_config.yaml``."""

import sys

from skinet.cli import main

if __name__ == "__main__":
    sys.exit(main(["train", *sys.argv[1:]]))
