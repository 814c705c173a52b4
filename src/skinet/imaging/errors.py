"""Dataset problems and the error that lists all of them at once."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a dataset: the file (or folder) and what is wrong with it."""

    path: Path
    """File or folder the problem is about."""
    message: str
    """What is wrong, e.g. ``missing mask (expected .../ISIC_0000001_segmentation.png)``."""
    split: str | None = None
    """``train``, ``val`` or ``test`` when the problem belongs to one split."""

    def __str__(self) -> str:
        where = f"[{self.split}] " if self.split else ""
        return f"{where}{self.path}: {self.message}"


SHOWN_PROBLEMS = 10
"""How many problems a :class:`DatasetError`'s message lists (``problems`` holds them all)."""


class DatasetError(ValueError):
    """A dataset cannot be used; ``problems`` lists every problem found, not just the first."""

    def __init__(self, problems: Iterable[Problem] | str, header: str | None = None) -> None:
        if isinstance(problems, str):
            self.problems: list[Problem] = []
            super().__init__(problems)
            return
        self.problems = list(problems)
        header = header or f"dataset has {len(self.problems)} problem(s)"
        lines = [f"{header}:"] + [f"  - {problem}" for problem in self.problems[:SHOWN_PROBLEMS]]
        if len(self.problems) > SHOWN_PROBLEMS:
            more = len(self.problems) - SHOWN_PROBLEMS
            lines.append(f"  ... and {more} more (skinet data verify lists every one)")
        super().__init__("\n".join(lines))
