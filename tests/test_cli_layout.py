"""The command-line layer: subcommand modules below ``skinet.cli``, no import cycle among them."""

from __future__ import annotations

import argparse
import ast
import importlib
from pathlib import Path
from typing import get_args

import skinet
from skinet.cli import SUBCOMMAND_GROUPS, build_parser
from skinet.config.data import DatasetName

SRC = Path(skinet.__file__).parent
SHARED = ("skinet.config.arguments", "skinet.extras")


def _module_name(path: Path) -> str:
    parts = path.relative_to(SRC.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(p): p for p in SRC.rglob("*.py")}
CLI_MODULES = sorted(
    {"skinet.cli", *(entry.partition(":")[0] for entry in SUBCOMMAND_GROUPS), *SHARED}
)


def _imports(path: Path) -> set[str]:
    """SkiNet modules ``path`` imports anywhere (inside functions too), names resolved to the
    submodule when ``from package import submodule`` is used."""
    found: set[str] = set()
    tree = ast.parse(path.read_text())
    # Imports under ``if TYPE_CHECKING:`` never run, so they make no cycle.
    typing_only = {
        id(inner)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
        for child in node.body
        for inner in ast.walk(child)
    }
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name in MODULES}
        elif isinstance(node, ast.ImportFrom) and node.module in MODULES and not node.level:
            found.add(node.module)
            found |= {f"{node.module}.{a.name}" for a in node.names} & MODULES.keys()
    return found


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every module of ``graph`` that reaches itself, with one path back to it."""
    cycles = []
    for start in sorted(graph):
        stack, seen = [(start, [start])], set()
        while stack:
            module, path = stack.pop()
            for target in sorted(graph.get(module, ())):
                if target == start:
                    cycles.append([*path, start])
                    stack.clear()
                    break
                if target not in seen:
                    seen.add(target)
                    stack.append((target, [*path, target]))
    return cycles


def test_no_import_cycle_through_a_cli_module() -> None:
    graph = {name: _imports(path) for name, path in MODULES.items()}
    through_cli = [c for c in _cycles(graph) if c[0] in CLI_MODULES]
    assert not through_cli, through_cli


def test_subcommand_modules_import_only_the_shared_helpers_of_the_cli_layer() -> None:
    for name in CLI_MODULES:
        others = (_imports(MODULES[name]) & set(CLI_MODULES)) - set(SHARED) - {name}
        assert not others, f"{name} imports {sorted(others)}; share helpers via {SHARED}"


def test_cycle_detector_sees_the_old_two_way_import() -> None:
    graph = {"skinet.cli": {"skinet.sweep.cli"}, "skinet.sweep.cli": {"skinet.cli"}}
    assert _cycles(graph) == [
        ["skinet.cli", "skinet.sweep.cli", "skinet.cli"],
        ["skinet.sweep.cli", "skinet.cli", "skinet.sweep.cli"],
    ]


def test_every_group_registers_through_one_function_of_the_same_shape() -> None:
    for entry in SUBCOMMAND_GROUPS:
        module, _, function = entry.partition(":")
        register = getattr(importlib.import_module(module), function)
        parser = argparse.ArgumentParser()
        subparsers = parser.add_subparsers()
        register(subparsers)
        assert subparsers.choices, entry
        for name, sub in subparsers.choices.items():
            leaves = [sub]
            while leaves:
                leaf = leaves.pop()
                nested = [a for a in leaf._actions if isinstance(a, argparse._SubParsersAction)]
                if nested:
                    leaves += [p for a in nested for p in a.choices.values()]
                else:
                    assert callable(leaf.get_default("func")), (entry, name)


def test_handler_type_is_defined_once() -> None:
    definitions = [
        name
        for name, path in MODULES.items()
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Assign | ast.AnnAssign)
        for target in (node.targets if isinstance(node, ast.Assign) else [node.target])
        if isinstance(target, ast.Name) and target.id == "Handler"
    ]
    assert definitions == ["skinet.config.arguments"]


def test_dataset_choices_come_from_the_schema() -> None:
    names = set(get_args(DatasetName))
    found = []

    def visit(parser: argparse.ArgumentParser, where: str) -> None:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    visit(sub, f"{where} {name}")
            elif "--dataset" in action.option_strings:
                found.append(where)
                assert set(action.choices or ()) == names, where

    visit(build_parser(), "skinet")
    assert {"skinet evaluate", "skinet data verify", "skinet data stats"} <= set(found)
