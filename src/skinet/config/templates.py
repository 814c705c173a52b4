"""The experiment configs shipped with SkiNet, as templates a user copies and edits.

They are the files of the repository's ``configs/`` folder, packaged as ``skinet/configs`` in
the wheel, so ``pip install skinet`` users get the same files as a clone:
``skinet config init cpu_budget`` writes ``cpu_budget.yaml`` into the current folder.
"""

from __future__ import annotations

import os
from importlib.resources import files
from importlib.resources.abc import Traversable
from pathlib import Path

from skinet.config.errors import UsageError


def _folder() -> Traversable:
    return files("skinet") / "configs"


def template_names() -> list[str]:
    """Names of the shipped configs (file stems), sorted; empty if the package holds none."""
    folder = _folder()
    if not folder.is_dir():
        return []
    return sorted(
        p.name.removesuffix(".yaml") for p in folder.iterdir() if p.name.endswith(".yaml")
    )


def template_text(name: str) -> str:
    """The text of the shipped config ``name`` (``cpu_budget`` or ``cpu_budget.yaml``).

    Raises:
        UsageError: no shipped config has that name; the message lists those that do.
    """
    return _template(name).read_text()


def _template(name: str) -> Traversable:
    template = _folder() / f"{name.removesuffix('.yaml')}.yaml"
    if Path(name).name != name or not template.is_file():  # a bare name, nothing above it
        raise UsageError(f"no shipped config named {name!r}; {shipped_configs_hint()}")
    return template


def template_summary(name: str) -> str:
    """What the template is for: the first line of its opening comment."""
    first, _, _ = template_text(name).partition("\n")
    return first.lstrip("#").strip().rstrip(".:") if first.startswith("#") else ""


def shipped_configs_hint() -> str:
    """``the shipped configs: a, b, ... (skinet config init NAME writes NAME.yaml here)``."""
    names = template_names()
    if not names:
        return "this installation ships no configs"
    return (
        f"the shipped configs: {', '.join(names)} "
        "(`skinet config init NAME` writes NAME.yaml into the current folder)"
    )


def write_template(name: str, output: str | Path | None = None, force: bool = False) -> Path:
    """Write the shipped config ``name``, byte for byte, to ``output``: ``./NAME.yaml`` when
    ``None``, ``output/NAME.yaml`` for a folder (an existing one, or a path ending in ``/``),
    else that file; missing folders are made. A file already there needs ``force``.

    Raises:
        UsageError: an unknown name, or the file exists and ``force`` is false.
    """
    template = _template(name)
    if output is None or str(output).endswith(("/", os.sep)) or Path(output).is_dir():
        target = Path(output or ".") / template.name
    else:
        target = Path(output)
    if target.exists() and not force:
        raise UsageError(f"{target} already exists; give --force to overwrite it, or --output PATH")
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(template.read_bytes())
    return target
