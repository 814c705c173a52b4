"""The sweep package's internal imports flow one way (no module imports one that imports it)."""

from __future__ import annotations

import ast
from pathlib import Path

import skinet.experiments

PACKAGE = Path(skinet.experiments.__file__).parent


def _sweep_imports(path: Path) -> set[str]:
    """``skinet.experiments.*`` modules imported anywhere in ``path`` (also inside functions)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            if node.module == "skinet.experiments":
                names |= {f"skinet.experiments.{alias.name}" for alias in node.names}
            elif node.module.startswith("skinet.experiments."):
                names.add(node.module)
        elif isinstance(node, ast.Import):
            names |= {a.name for a in node.names if a.name.startswith("skinet.experiments.")}
    modules = {f"skinet.experiments.{p.stem}" for p in PACKAGE.glob("*.py")}
    return names & modules


def test_no_import_cycle_between_sweep_modules() -> None:
    graph = {
        f"skinet.experiments.{p.stem}": _sweep_imports(p)
        for p in PACKAGE.glob("*.py")
        if p.stem != "__init__"
    }

    def reaches(start: str, target: str, seen: set[str]) -> bool:
        for module in graph.get(start, set()):
            if module == target or (
                module not in seen and reaches(module, target, seen | {module})
            ):
                return True
        return False

    cycles = sorted(m for m in graph if reaches(m, m, set()))
    assert not cycles, {m: sorted(graph[m]) for m in cycles}
    assert "skinet.experiments.study" not in graph["skinet.experiments.mlflow_parent"]


def test_study_tag_lives_with_the_other_names() -> None:
    from skinet.keys import STUDY_TAG

    assert STUDY_TAG == "skinet.optuna_study"
