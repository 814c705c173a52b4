"""``skinet config show|check|init``: the resolved config on screen, validation alone, and the
shipped configs copied out as templates."""

from __future__ import annotations

import argparse
import shlex
from typing import Any

from skinet.cli.arguments import add_config_arguments, load_config_from_args, parse_overrides


def run_config_show(args: argparse.Namespace) -> int:
    """Print the config with every default and derived value as YAML; with ``--resolved``, also
    under ``RESOLVED`` what its automatic values resolve to on this machine.

    The schema is validated, but the augmentations are not built (albumentations imports torch
    and OpenCV, seconds of start-up): ``config check`` and every training command build them.
    Resolving asks torch for the machine's accelerators, so only ``--resolved`` imports it.
    """
    import yaml

    from skinet.config.experiment import load_config

    cfg = load_config(args.config, parse_overrides(args.set or []))
    if args.resolved:
        from skinet.runtime.devices import config_with_resolved

        print(yaml.safe_dump(config_with_resolved(cfg), sort_keys=False), end="")
    else:
        print(yaml.safe_dump(cfg.to_yaml_dict(), sort_keys=False), end="")
        print("# automatic values (null) resolve where the run starts: config show --resolved")
    return 0


def run_config_check(args: argparse.Namespace) -> int:
    """Validate the config; 0 when valid (an invalid one raises ConfigError: exit 2)."""
    from skinet.augment.checks import transforms_checkable

    load_config_from_args(args)
    overrides = f" with {len(args.set)} override(s)" if args.set else ""
    print(f"OK {args.config}{overrides} is a valid SkiNet config")
    if not transforms_checkable():
        print(
            "note: TRANSFORM_CONFIG was not checked: albumentations is not installed "
            "(pip install 'skinet[train]')"
        )
    return 0


def run_config_init(args: argparse.Namespace) -> int:
    """Write a shipped config into the current folder (or ``--output``); no name: list them."""
    import yaml

    from skinet.config.templates import template_names, template_summary, write_template

    if args.name is None:
        names = template_names()
        width = max(map(len, names), default=0)
        for name in names:
            print(f"{name:<{width}}  {template_summary(name)}")
        print("skinet config init NAME writes NAME.yaml into the current folder")
        return 0
    written = write_template(args.name, args.output, force=args.force)
    print(f"wrote {written}")
    if set(yaml.safe_load(written.read_text())) == {"TRANSFORM_CONFIG"}:
        print("paste its TRANSFORM_CONFIG into an experiment config in place of that section")
    else:
        print(f"check it: skinet config check --config {shlex.quote(str(written))}")
        print(f"train it: skinet train --config {shlex.quote(str(written))}")
    return 0


def add_config_subcommands(subparsers: Any) -> None:
    """Register ``config show``, ``check`` and ``init``; each sets ``func`` to its handler."""
    config = subparsers.add_parser("config", help="print, check or start from an experiment config")
    commands = config.add_subparsers(dest="config_command", required=True, metavar="COMMAND")
    show = commands.add_parser(
        "show", help="print the resolved config (every default and derived value) as YAML"
    )
    add_config_arguments(show)
    show.add_argument(
        "--resolved",
        action="store_true",
        help="also print, under RESOLVED, what the automatic values resolve to on this machine "
        "(imports torch to ask for its accelerators)",
    )
    show.set_defaults(func=run_config_show)
    check = commands.add_parser("check", help="validate a config: exit 0 when valid, 2 if not")
    add_config_arguments(check)
    check.set_defaults(func=run_config_check)
    init = commands.add_parser(
        "init",
        help="write a shipped config (cpu_budget, main_config, ...) into the current folder; "
        "without NAME, list them",
    )
    init.add_argument("name", nargs="?", metavar="NAME", help="the shipped config to copy")
    init.add_argument(
        "--output", help="file, or folder ending in /, to write (default: ./NAME.yaml)"
    )
    init.add_argument("--force", action="store_true", help="overwrite a file already there")
    init.set_defaults(func=run_config_init)
