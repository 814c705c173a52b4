"""Generate the field tables of ``docs/configuration.md`` from the pydantic config models.

Usage::

    python docs/gen_config_reference.py          # rewrite the tables in docs/configuration.md
    python docs/gen_config_reference.py --check  # exit 1 if they are out of date

The tables sit between the ``BEGIN``/``END`` markers below; everything outside them is written by
hand. For every section of :class:`skinet.config.experiment.ExperimentConfig` (and every nested
section,
such as ``TRAIN_CONFIG.lr_scheduler_config``) each field gets its type, constraints, default and
the one-line docstring written under it in ``src/skinet/config/*.py``. Pydantic only keeps those
docstrings with ``use_attribute_docstrings=True``, which the config models do not set, so they are
read from the source with :mod:`ast`. ``tests/docs/test_config_reference.py`` fails when the
tables drift from the schema.
"""

from __future__ import annotations

import argparse
import ast
import inspect
import re
import sys
import textwrap
import types
import typing
from functools import cache
from pathlib import Path
from typing import Any, Literal, get_args, get_origin

import annotated_types
from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

DOCS = Path(__file__).resolve().parent
TARGET = DOCS / "configuration.md"
BEGIN = "<!-- BEGIN GENERATED CONFIG REFERENCE: python docs/gen_config_reference.py -->"
END = "<!-- END GENERATED CONFIG REFERENCE -->"

if str(DOCS.parent / "src") not in sys.path:  # run from a checkout without `pip install -e .`
    sys.path.insert(0, str(DOCS.parent / "src"))

from skinet.config.experiment import ExperimentConfig  # noqa: E402


@cache
def attribute_docstrings(cls: type) -> dict[str, str]:
    """``{field: docstring}`` of the string literals written under annotated class attributes."""
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):  # base classes first, subclasses override
        if not (isinstance(klass, type) and issubclass(klass, BaseModel)) or klass is BaseModel:
            continue
        try:
            source = textwrap.dedent(inspect.getsource(klass))
        except (OSError, TypeError):
            continue
        body = ast.parse(source).body[0]
        assert isinstance(body, ast.ClassDef)
        for node, following in zip(body.body, body.body[1:], strict=False):
            if (
                isinstance(node, ast.AnnAssign)
                and isinstance(node.target, ast.Name)
                and isinstance(following, ast.Expr)
                and isinstance(following.value, ast.Constant)
                and isinstance(following.value.value, str)
            ):
                docs[node.target.id] = " ".join(inspect.cleandoc(following.value.value).split())
    return docs


def rst_to_md(text: str) -> str:
    """RST inline literals (````x````) and roles (``:class:`x```) to Markdown code spans."""
    text = re.sub(r":\w+:`~?([^`]+)`", r"`\1`", text)
    return re.sub(r"``([^`]+)``", r"`\1`", text)


def format_type(annotation: Any) -> str:
    """A short, readable spelling of a field annotation."""
    origin, args = get_origin(annotation), get_args(annotation)
    if annotation is type(None):
        return "None"
    if origin is Literal:
        return " | ".join(f'"{a}"' if isinstance(a, str) else repr(a) for a in args)
    if origin in (typing.Union, types.UnionType):
        return " | ".join(format_type(a) for a in args)
    if origin is not None:
        name = getattr(origin, "__name__", str(origin))
        return f"{name}[{', '.join(format_type(a) for a in args)}]"
    if annotation is Any:
        return "Any"
    return getattr(annotation, "__name__", str(annotation))


_BOUNDS = (
    (annotated_types.Gt, "gt", ">"),
    (annotated_types.Ge, "ge", "≥"),
    (annotated_types.Lt, "lt", "<"),
    (annotated_types.Le, "le", "≤"),
)


def format_constraints(field: FieldInfo) -> str:
    """Bounds and lengths from ``Field(gt=..., min_length=...)``, e.g. ``> 0, ≤ 1``."""
    parts = []
    for item in field.metadata:
        for kind, attr, symbol in _BOUNDS:
            if isinstance(item, kind):
                parts.append(f"{symbol} {getattr(item, attr)}")
        if isinstance(item, annotated_types.MinLen):
            parts.append(f"≥ {item.min_length} item{'s' if item.min_length != 1 else ''}")
    return ", ".join(parts)


def format_value(value: Any) -> str:
    """A default as the reader would write it in YAML-ish Python: ``None``, ``8``, ``"adamw"``."""
    if isinstance(value, BaseModel):
        first = next(iter(type(value).model_fields))
        return str(getattr(value, first))
    if isinstance(value, list | tuple):
        items = ", ".join(format_value(v) for v in value)
        return f"[{items}]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {format_value(v)}" for k, v in value.items()) + "}"
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, float):
        text = f"{value:.6g}"
        if "e" in text:  # 1e-06 -> 1e-6
            mantissa, exponent = text.split("e")
            return f"{mantissa}e{int(exponent)}"
        return text if "." in text else f"{text}.0"
    return repr(value)


def nested_section(annotation: Any) -> tuple[type[BaseModel], bool] | None:
    """``(model, is_list)`` when a field holds a config section or a list of them."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation, False
    if get_origin(annotation) in (typing.Union, types.UnionType):  # an optional section
        sections = [a for a in get_args(annotation) if a is not type(None)]
        if len(sections) == 1 and isinstance(sections[0], type):
            return nested_section(sections[0])
        return None
    if get_origin(annotation) is list:
        (item,) = get_args(annotation)
        if isinstance(item, type) and issubclass(item, BaseModel):
            return item, True
    return None


def cell(text: str) -> str:
    """Escape a table cell: pipes would end the cell, newlines the row."""
    return text.replace("|", "\\|").replace("\n", " ")


def section_table(path: str, model: type[BaseModel]) -> tuple[list[str], list[tuple[str, type]]]:
    """Markdown lines of one section's table, and the nested sections found in it."""
    docs = attribute_docstrings(model)
    nested: list[tuple[str, type]] = []
    lines = [
        "| Field | Type | Default | Description |",
        "|---|---|---|---|",
    ]
    for name, field in model.model_fields.items():
        sub = nested_section(field.annotation)
        type_text = format_type(field.annotation)
        constraints = format_constraints(field)
        if constraints:
            type_text += f" ({constraints})"
        if sub is not None and not sub[1]:
            nested.append((f"{path}.{name}", sub[0]))
            default = f"see `{path}.{name}`"
            if field.default is None:
                default = f"`None` (off); {default}"
        else:
            if sub is not None:
                nested.append((f"{path}.{name}[]", sub[0]))
            if field.default_factory is not None:
                value = field.default_factory()  # type: ignore[call-arg]
            elif field.default is PydanticUndefined:
                value = PydanticUndefined
            else:
                value = field.default
            default = "required" if value is PydanticUndefined else f"`{format_value(value)}`"
        description = rst_to_md(docs.get(name, ""))
        lines.append(f"| `{name}` | `{cell(type_text)}` | {cell(default)} | {cell(description)} |")
    return lines, nested


def render_reference() -> str:
    """The generated block: one table per section and nested section, in schema order."""
    out = [
        BEGIN,
        "",
        "<!-- Generated from the pydantic models in src/skinet/config; do not edit by hand. -->",
        "",
    ]
    for name, field in ExperimentConfig.model_fields.items():
        alias = field.alias or name
        model = field.annotation
        assert isinstance(model, type) and issubclass(model, BaseModel)
        todo: list[tuple[str, type]] = [(alias, model)]
        while todo:
            path, section = todo.pop(0)
            lines, nested = section_table(path, section)
            summary = inspect.cleandoc(section.__doc__ or "").split("\n\n")[0]
            out += [f"### `{path}`", "", rst_to_md(" ".join(summary.split())), ""]
            out += [*lines, ""]
            todo = nested + todo
    out.append(END)
    return "\n".join(out)


def update_text(text: str) -> str:
    """``text`` with the block between the markers replaced by :func:`render_reference`."""
    start, stop = text.find(BEGIN), text.find(END)
    if start < 0 or stop < start:
        raise ValueError(f"markers not found in the page:\n{BEGIN}\n...\n{END}")
    return text[:start] + render_reference() + text[stop + len(END) :]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the page is outdated")
    parser.add_argument("--page", type=Path, default=TARGET, help="the page to update")
    args = parser.parse_args(argv)
    current = args.page.read_text(encoding="utf-8")
    updated = update_text(current)
    if args.check:
        if updated != current:
            print(f"{args.page} is out of date: run python docs/gen_config_reference.py")
            return 1
        return 0
    if updated != current:
        args.page.write_text(updated, encoding="utf-8")
        print(f"updated {args.page}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
