"""glibc's allocator told to keep freed memory, set for every ``skinet`` process on Linux.

A training or inference step on the CPU frees and allocates the same activation buffers again
and again. glibc serves a block of 32 MB or more with ``mmap`` and hands it back to the system
on ``free``, so every step page-faults it in again; with
``MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=2147483647`` glibc keeps freed memory in its heap
for the next step. ``benchmarks/bench_allocator.py`` on 2 cores: ``main_config.yaml`` at 256 px
trains 1.31x faster per step; at 128 px (``cpu_budget.yaml``) the activations stay under the
threshold and the speed is the same. glibc reads the variables once, when a process starts, so
:func:`reexec_with_malloc_env` restarts the command with them before anything heavy is imported.
DataLoader workers and DDP ranks inherit them.

A variable the user has already set is kept as it is (neither is then added), and
``SKINET_MALLOC_TUNING=0`` turns the restart off. Other platforms and C libraries are left alone.
"""

from __future__ import annotations

import os
import platform
import sys
from collections.abc import Mapping

MALLOC_ENV = {"MALLOC_MMAP_MAX_": "0", "MALLOC_TRIM_THRESHOLD_": "2147483647"}
"""No ``mmap`` for large blocks, and no trimming of the heap's free top."""

OPT_OUT = "SKINET_MALLOC_TUNING"
"""Environment variable: ``0`` leaves the allocator as the system configures it."""


def _is_glibc() -> bool:
    return sys.platform == "linux" and platform.libc_ver()[0] == "glibc"


def malloc_tuning(environ: Mapping[str, str] | None = None) -> str:
    """How this process's allocator is set, as one line for ``skinet info``."""
    env = os.environ if environ is None else environ
    if not _is_glibc():
        return "default (not glibc)"
    values = " ".join(f"{key}={env[key]}" for key in MALLOC_ENV if key in env)
    if all(env.get(key) == value for key, value in MALLOC_ENV.items()):
        return f"glibc, tuned for training ({values}; {OPT_OUT}=0 turns it off)"
    if values:
        return f"glibc, as set by the environment ({values})"
    return "glibc defaults"


def wants_reexec(environ: Mapping[str, str] | None = None) -> bool:
    """Whether this process should restart with :data:`MALLOC_ENV`."""
    env = os.environ if environ is None else environ
    return (
        _is_glibc()
        and env.get(OPT_OUT, "1") != "0"
        and not any(key in env for key in MALLOC_ENV)  # the user's own setting, or done already
        and bool(sys.executable)
    )


def untuned_hint() -> str | None:
    """What to do when a training process runs on glibc's defaults (a notebook, a script of
    one's own); ``None`` when tuned, set by the user, turned off or not glibc."""
    if not wants_reexec():
        return None
    settings = " ".join(f"{key}={value}" for key, value in MALLOC_ENV.items())
    return (
        "glibc's allocator is at its defaults, which makes CPU steps at 256 px about 1.3x slower: "
        f"start through `skinet`, `python -m skinet` or main_run.py, or set {settings} before "
        f"Python starts ({OPT_OUT}=0 silences this)"
    )


def reexec_with_malloc_env() -> None:
    """Replace this process with the same command line plus :data:`MALLOC_ENV` (once).

    Call it first thing in an entry point: the restart repeats whatever ran before it.
    """
    if not wants_reexec():
        return
    sys.stdout.flush()
    sys.stderr.flush()
    argv = [sys.executable, *sys.orig_argv[1:]]  # keeps -m, -X and friends
    os.execve(sys.executable, argv, {**os.environ, **MALLOC_ENV})
