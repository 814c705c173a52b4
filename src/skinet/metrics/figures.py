"""How a measured difference is written: with its sign, and never as a 0 it is not."""

from __future__ import annotations

import math


def signed(value: float) -> str:
    """``value`` with its sign and four decimals, or as many more as it takes not to show a
    figure that is not 0 as ``+0.0000`` (next to "better", that reads as a contradiction).

    ``-0.0`` prints as ``+0.0000``; a value below 5e-9 in e-notation (rounding noise, not a
    difference anyone measured).
    """
    value += 0.0  # -0.0 prints as +0.0000
    if value == 0 or not math.isfinite(value) or abs(value) >= 0.5e-4:
        return f"{value:+.4f}"
    if abs(value) < 0.5e-8:
        return f"{value:+.0e}"
    return f"{value:+.{-math.floor(math.log10(abs(value)))}f}"
