"""``skinet --help``, every ``<command> --help``, ``--version``, ``config show`` and ``config
init`` answer at once: no torch, OpenCV, matplotlib or SciPy is imported, and the process does
not restart itself for the allocator."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from skinet.runtime.allocator import MALLOC_ENV, OPT_OUT, malloc_tuning

REPO = Path(__file__).resolve().parents[2]
HEAVY = ("torch", "cv2", "matplotlib", "scipy")

# Run in a fresh interpreter: the test process has imported torch long ago. Builds the parser,
# asks every (nested) command for --help, --version and config show of a config with automatic
# values, and prints which of the modules named on its command line are loaded, with the
# commands it asked.
PROBE = """
import argparse, contextlib, io, json, sys
from skinet.cli.main import build_parser, main

def commands(parser, path=()):
    yield path
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from commands(sub, (*path, name))

asked = []
for path in commands(build_parser()):
    for argv in ([*path, "--help"], [*path, "-h"]):
        with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):
            main(argv)
        asked.append(" ".join(argv))
with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):
    main(["--version"])
with contextlib.redirect_stdout(io.StringIO()):
    assert main(["config", "show", "--config", "configs/quickstart.yaml"]) == 0  # accelerator auto
    assert main(["config", "init"]) == 0  # the list of shipped configs
heavy = sorted(name for name in sys.argv[1:] if name in sys.modules)
print(json.dumps({"heavy": heavy, "asked": asked}))
"""


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in MALLOC_ENV and k != OPT_OUT}
    return {**env, "PYTHONPATH": str(REPO / "src"), **extra}


@pytest.mark.process
def test_help_version_and_config_show_import_no_torch_opencv_matplotlib_or_scipy() -> None:
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, *HEAVY],
        capture_output=True,
        text=True,
        timeout=120,
        env=_env(),
        cwd=REPO,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert "data verify --help" in report["asked"]  # nested commands are asked too
    assert "config show --help" in report["asked"]
    assert report["heavy"] == []


def _starts(argv: list[str]) -> int:
    """How many interpreters ``python -m skinet <argv>`` ran (``-X importtime`` reports each
    one's imports; the restart keeps ``-X``)."""
    command = [sys.executable, "-X", "importtime", "-m", "skinet", *argv]
    proc = subprocess.run(
        command, capture_output=True, text=True, timeout=120, env=_env(), cwd=REPO
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stderr.splitlines()
    return sum(line.endswith("| skinet.runtime.allocator") for line in lines)


@pytest.mark.process
@pytest.mark.skipif(
    "tuned" not in malloc_tuning(dict(MALLOC_ENV)), reason="the restart is for glibc only"
)
def test_help_and_version_do_not_restart_for_the_allocator(tmp_path: Path) -> None:
    assert _starts(["--help"]) == 1
    assert _starts(["data", "verify", "--help"]) == 1
    assert _starts(["--version"]) == 1
    assert _starts(["config", "show", "--config", "configs/cpu_budget.yaml"]) == 1
    # a command that runs still restarts once with the tuned allocator
    assert _starts(["data", "cache", "--list", "--cache-dir", str(tmp_path)]) == 2
