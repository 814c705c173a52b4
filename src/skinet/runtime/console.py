"""Where SkiNet's tables and messages are drawn: :func:`console`."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.console import Console

OFF_TERMINAL_WIDTH = 240
"""Columns of a table written to a file or a pipe, where rich would assume 80 and cut paths and
names short (``/tmp/runs/tiny_val_best_dice_at_t…``)."""


def console(stderr: bool = False) -> Console:
    """A rich console: the terminal's width on a terminal (or in Jupyter); elsewhere (a log
    file, a pipe, CI) :data:`OFF_TERMINAL_WIDTH` columns unless ``COLUMNS`` says otherwise."""
    from rich.console import Console

    drawn = Console(stderr=stderr)
    if drawn.is_terminal or drawn.is_jupyter or "COLUMNS" in os.environ:
        return drawn
    return Console(stderr=stderr, width=OFF_TERMINAL_WIDTH)
