"""Start-up time of ``python -m skinet --help`` as whole processes, against baselines timed in
the same run.

Each round starts every command once, in a fresh process, in an order that rotates from round to
round: ``python -c pass`` (the interpreter alone), ``python -c "import torch"`` (what a command
that loads torch pays before doing anything), ``python -m skinet --help`` and, with
``--other-src DIR``, the same ``--help`` from another source tree (e.g. a checkout of the previous
release: ``DIR`` is put first on ``PYTHONPATH``). Figures: the median wall time of each command and
its ratio to ``skinet --help``. Asserts nothing.

    python benchmarks/bench_cli_startup.py
    python benchmarks/bench_cli_startup.py --rounds 10 --other-src ../skinet-main/src
    python benchmarks/bench_cli_startup.py --args config show --config configs/cpu_budget.yaml
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=7, help="processes per command (default 7)")
    parser.add_argument(
        "--other-src",
        type=Path,
        help="another tree's src/ folder whose `skinet --help` is timed as well",
    )
    parser.add_argument(
        "--args",
        nargs=argparse.REMAINDER,
        default=["--help"],
        help="the skinet command line to time (default: --help); give it last",
    )
    return parser.parse_args()


def _wall_seconds(command: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run(command, env=env, cwd=REPO, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def main() -> int:
    args = parse_args()
    python = sys.executable
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    shown = " ".join(args.args)
    commands: dict[str, tuple[list[str], dict[str, str]]] = {
        f"skinet {shown}": ([python, "-m", "skinet", *args.args], env),
        "python -c pass": ([python, "-c", "pass"], env),
        "python -c 'import torch'": ([python, "-c", "import torch"], env),
    }
    if args.other_src is not None:
        other = {**os.environ, "PYTHONPATH": str(args.other_src.resolve())}
        commands[f"skinet {shown} ({args.other_src})"] = (
            [python, "-m", "skinet", *args.args],
            other,
        )
    names = list(commands)
    times: dict[str, list[float]] = {name: [] for name in names}
    for round_index in range(args.rounds):
        shift = round_index % len(names)
        for name in names[shift:] + names[:shift]:
            command, command_env = commands[name]
            times[name].append(_wall_seconds(command, command_env))
    reference = statistics.median(times[names[0]])
    print(f"{args.rounds} processes each, median wall time (load average {os.getloadavg()[0]:.1f})")
    for name in names:
        median = statistics.median(times[name])
        print(f"  {name:<60} {median:6.3f} s   {median / reference:5.2f}x skinet {shown}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
