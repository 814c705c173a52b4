"""The argument parser of ``skinet``: argparse that names a mistyped option first."""

from __future__ import annotations

import argparse
import difflib
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

_REQUIRED = "the following arguments are required"


class SkinetArgumentParser(argparse.ArgumentParser):
    """``argparse.ArgumentParser`` whose errors point at an unknown option and its likely name.

    argparse checks required options before it reports unknown ones, so ``skinet predict
    --chekpoint m.ckpt ...`` would say ``--checkpoint`` is missing while the user typed it. This
    parser reports the unknown option instead, with the closest known one. Subparsers are of the
    same class (argparse makes them with the parser's own type).
    """

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: Any = None
    ) -> tuple[argparse.Namespace, list[str]]:
        self._arg_strings = list(sys.argv[1:] if args is None else args)
        parsed = super().parse_known_args(args, namespace)
        self.check_one_spelling(self._arg_strings)
        return parsed

    def check_one_spelling(self, arg_strings: Sequence[str]) -> None:
        """Refuse one option given under two of its names (``--input a --images b``), which
        argparse would settle silently by keeping the last."""
        seen: dict[argparse.Action, str] = {}
        commands = {
            name
            for action in self._actions
            if isinstance(action, argparse._SubParsersAction)
            for name in action.choices
        }
        for word in arg_strings:
            if word == "--" or word in commands:
                break  # what follows a subcommand is its parser's to check
            action = self._option_string_actions.get(word.split("=", 1)[0])
            if action is None or isinstance(action, argparse._AppendAction):
                continue
            name = word.split("=", 1)[0]
            first = seen.setdefault(action, name)
            if first != name:
                self.error(f"{first} and {name} are the same option: give it once")

    def parse_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: Any = None
    ) -> argparse.Namespace:
        namespace, extras = self.parse_known_args(args, namespace)
        if extras:
            # Reported by the subcommand that ran, with its usage and the closest option.
            parser = self.leaf_parser(namespace)
            option = next((word for word in extras if word.startswith("-")), None)
            hint = parser.suggestion(option.split("=", 1)[0]) if option else ""
            parser.error(f"unrecognized arguments: {' '.join(extras)}{hint}")
        return namespace

    def leaf_parser(self, namespace: argparse.Namespace) -> SkinetArgumentParser:
        """The parser of the (sub)subcommand that ``namespace`` was parsed by."""
        for action in self._actions:
            if isinstance(action, argparse._SubParsersAction):
                sub = action.choices.get(getattr(namespace, action.dest, None) or "")
                if isinstance(sub, SkinetArgumentParser):
                    return sub.leaf_parser(namespace)
        return self

    def error(self, message: str) -> NoReturn:
        if message.startswith(_REQUIRED):
            unknown = self.unknown_options(getattr(self, "_arg_strings", []))
            if unknown:
                message = f"unrecognized argument {unknown[0]}{self.suggestion(unknown[0])}"
        super().error(message)

    def unknown_options(self, arg_strings: Sequence[str]) -> list[str]:
        """Option-like words that name none of this parser's options (nor a prefix of one)."""
        known = list(self._option_string_actions)
        unknown = []
        for word in arg_strings:
            if word == "--":
                break
            name = word.split("=", 1)[0]
            if not name.startswith("-") or name == "-" or self._negative_number_matcher.match(name):
                continue
            abbreviates = name.startswith("--") and any(o.startswith(name) for o in known)
            if name not in known and not abbreviates:
                unknown.append(name)
        return unknown

    def suggestion(self, option: str) -> str:
        """`` (did you mean --checkpoint?)`` for the closest option, or nothing."""
        close = difflib.get_close_matches(option, list(self._option_string_actions), n=1)
        return f" (did you mean {close[0]}?)" if close else ""
