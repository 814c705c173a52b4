"""The ``skinet`` command, ``python -m skinet`` and the ``main_run.py``-style wrappers.

:func:`entry` restarts the process with the allocator settings of :mod:`skinet.runtime.allocator`
before the command line (and torch) is imported, unless the command line only asks for help,
the version or a config (:func:`answers_at_once`): those run no training or inference step, and
the restart would only double their start-up time. A command whose standard output's reader has
gone (``skinet config init | head -3``) ends quietly with status 141, like ``yes | head``.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from skinet.runtime.allocator import reexec_with_malloc_env
from skinet.runtime.pipes import (
    BROKEN_PIPE_EXIT,
    OutputClosed,
    release_if_reader_gone,
    release_stdout,
    stdout_released,
)

HELP_OPTIONS = ("-h", "--help", "--version")
"""Options that make ``skinet`` print and exit before any command runs."""
QUICK_COMMANDS = ("config",)
"""Subcommands that read a config and print: no tensor is allocated."""


def answers_at_once(argv: Sequence[str]) -> bool:
    """Whether ``skinet <argv>`` only prints help, the version or a config (decided from the
    words alone, before anything is imported)."""
    if any(arg in HELP_OPTIONS for arg in argv):
        return True
    words = [arg for arg in argv if not arg.startswith("-")]
    return bool(words) and words[0] in QUICK_COMMANDS


def entry(subcommand: Sequence[str] = ()) -> int:
    """Run ``skinet [subcommand] <sys.argv[1:]>``; the exit status."""
    argv = [*subcommand, *sys.argv[1:]]
    if not answers_at_once(argv):
        reexec_with_malloc_env()
    from skinet.cli.main import main

    try:
        status = main(argv)
    except SystemExit:  # argparse's --help, --version and usage errors
        _flush_stdout()
        raise
    except OutputClosed:
        return BROKEN_PIPE_EXIT
    except BrokenPipeError as error:  # a print's
        if not release_if_reader_gone(error):
            raise
        return BROKEN_PIPE_EXIT
    _flush_stdout()
    return BROKEN_PIPE_EXIT if stdout_released() else status


def _flush_stdout() -> None:
    """Flush the standard output here rather than at exit, where a gone reader would print
    ``Exception ignored ... BrokenPipeError`` and end with status 120."""
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        release_stdout()


if __name__ == "__main__":
    sys.exit(entry())
