"""Train, validate and test one model: ``python main_run.py --config configs/main_config.yaml``."""

import sys

from skinet.__main__ import entry

if __name__ == "__main__":
    sys.exit(entry(["train"]))
