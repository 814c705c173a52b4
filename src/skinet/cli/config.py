"""``skinet config show|check``: the resolved config on screen, and validation alone."""

from __future__ import annotations

import argparse
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


def add_config_subcommands(subparsers: Any) -> None:
    """Register ``config show`` and ``config check``; each sets ``func`` to its handler."""
    config = subparsers.add_parser("config", help="print or check a resolved experiment config")
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
