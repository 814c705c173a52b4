"""Where SkiNet's tables and messages are drawn: :func:`console`."""

from __future__ import annotations

import functools
import os
from typing import TYPE_CHECKING

from skinet.runtime.pipes import close_output_for

if TYPE_CHECKING:
    from rich.console import Console

OFF_TERMINAL_WIDTH = 240
"""Columns of a table written to a file or a pipe, where rich would assume 80 and cut paths and
names short (``/tmp/runs/tiny_val_best_dice_at_t…``)."""


def draws(shown: Console | None = None) -> bool:
    """Whether rich draws on ``shown`` (default: its global console): a terminal, Jupyter, or
    ``FORCE_COLOR`` / ``TTY_COMPATIBLE`` set. Elsewhere (a log file, a pipe, CI) SkiNet prints
    plain lines and no progress bar."""
    if shown is None:
        from rich import get_console

        shown = get_console()
    return shown.is_terminal or shown.is_jupyter


def console(stderr: bool = False) -> Console:
    """A rich console: the terminal's width where rich :func:`draws`; elsewhere
    :data:`OFF_TERMINAL_WIDTH` columns unless ``COLUMNS`` says otherwise."""
    drawn = _console_class()(stderr=stderr)
    if draws(drawn) or "COLUMNS" in os.environ:
        return drawn
    return _console_class()(stderr=stderr, width=OFF_TERMINAL_WIDTH)


@functools.cache
def _console_class() -> type[Console]:
    """rich's ``Console``, ending the command on a gone reader as a log line does
    (:mod:`skinet.runtime.pipes`): rich's own ``on_broken_pipe`` exits with status 1, which
    reads like a failed command."""
    from rich.console import Console

    class PipedConsole(Console):
        def on_broken_pipe(self) -> None:
            self.quiet = True  # nothing more from this console, whichever stream it writes to
            if not self.stderr:
                close_output_for(BrokenPipeError())

    return PipedConsole
