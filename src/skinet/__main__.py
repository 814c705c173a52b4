"""The ``skinet`` command, ``python -m skinet`` and the ``main_run.py``-style wrappers.

:func:`entry` restarts the process with the allocator settings of :mod:`skinet.runtime.allocator`
before the command line (and torch) is imported.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from skinet.runtime.allocator import reexec_with_malloc_env


def entry(subcommand: Sequence[str] = ()) -> int:
    """Run ``skinet [subcommand] <sys.argv[1:]>``; the exit status."""
    reexec_with_malloc_env()
    from skinet.cli.main import main

    return main([*subcommand, *sys.argv[1:]])


if __name__ == "__main__":
    sys.exit(entry())
