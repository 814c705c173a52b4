"""What every ``skinet`` subcommand module shares: the handler type, argument types, ``--config``
and ``--set``, and the usage error.

This module sits below every CLI module (``skinet.cli.main``, ``skinet.*.cli``), which import it and
never each other; it imports only the dataset names of the config schema, so that building the
parser (``skinet --help``) stays quick.
"""

from __future__ import annotations

import argparse
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from skinet.config.errors import ConfigError, UsageError
from skinet.datasets.registry import LAYOUTS

if TYPE_CHECKING:
    from skinet.config.experiment import ExperimentConfig

N = TypeVar("N", int, float)

Handler = Callable[[argparse.Namespace], int]
"""A subcommand's handler: the parsed arguments in, the exit status out."""

DATASET_NAMES: tuple[str, ...] = tuple(LAYOUTS)
"""Dataset layouts a ``--dataset`` option accepts: the registry's, as ``DATA_CONFIG.dataset``."""


def _number(
    text: str, convert: Callable[[str], N], accept: Callable[[N], bool], expected: str
) -> N:
    """``convert(text)`` if it converts and ``accept``s, else an ``ArgumentTypeError``."""
    try:
        value = convert(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}") from None
    if not accept(value):
        raise argparse.ArgumentTypeError(f"expected {expected}, got {value}")
    return value


def positive_int(text: str) -> int:
    """An ``argparse`` type: an integer >= 1."""
    return _number(text, int, lambda value: value >= 1, "an integer >= 1")


def non_negative_int(text: str) -> int:
    """An ``argparse`` type: an integer >= 0."""
    return _number(text, int, lambda value: value >= 0, "an integer >= 0")


def positive_float(text: str) -> float:
    """An ``argparse`` type: a finite number > 0."""
    return _number(text, float, lambda value: math.isfinite(value) and value > 0, "a number > 0")


def probability(text: str) -> float:
    """An ``argparse`` type: a number in [0, 1]."""
    return _number(text, float, lambda value: 0.0 <= value <= 1.0, "a number in [0, 1]")


@dataclass(frozen=True)
class ExternalSet:
    """A labelled folder given as ``--external NAME=IMAGES:MASKS``."""

    name: str
    images: Path
    masks: Path


EXTERNAL_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")


def external_set(text: str) -> ExternalSet:
    """An ``argparse`` type: ``NAME=IMAGES:MASKS``, a name and two existing folders."""
    name, sep, folders = text.partition("=")
    images, colon, masks = folders.rpartition(":")
    if not sep or not colon or not images or not masks:
        raise argparse.ArgumentTypeError(
            f"expected NAME=IMAGES:MASKS (e.g. clinic=clinic/images:clinic/masks), got {text!r}"
        )
    if not EXTERNAL_NAME.fullmatch(name):
        raise argparse.ArgumentTypeError(
            f"the name of {text!r} must be letters, digits, '_', '-' or '.' (it names a folder)"
        )
    for kind, folder in (("image", images), ("mask", masks)):
        if not Path(folder).is_dir():
            raise argparse.ArgumentTypeError(f"{name}: {kind} folder not found: {folder}")
    return ExternalSet(name, Path(images), Path(masks))


def parse_overrides(pairs: Sequence[str]) -> dict[str, Any]:
    """``["TRAIN_CONFIG.max_epochs=3"]`` -> ``{"TRAIN_CONFIG.max_epochs": 3}`` (values as YAML;
    an empty value is the empty string, as a shell user means by ``KEY=``; ``null`` is none)."""
    import yaml

    overrides: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ConfigError(f"--set expects SECTION.key=value, got {pair!r}")
        if not value.strip():
            overrides[key.strip()] = ""
            continue
        try:
            overrides[key.strip()] = yaml.safe_load(value)
        except yaml.YAMLError as error:
            problem = getattr(error, "problem", None) or "not valid YAML"
            raise ConfigError(
                f"--set {pair}: the value is not valid YAML ({problem}); quote it, e.g. "
                f"--set '{key.strip()}=\"{value}\"'"
            ) from None
    return overrides


def add_option(
    parser: argparse.ArgumentParser, *names: str, hidden: Sequence[str] = (), **kwargs: Any
) -> argparse.Action:
    """``parser.add_argument(*names, **kwargs)`` that also accepts the old spellings ``hidden``.

    An old spelling parses as the option itself (same ``dest``, same checks, ``required`` met by
    either), but ``--help``, the usage line and error messages show only ``names``.
    """
    action = parser.add_argument(*names, *hidden, **kwargs)
    action.option_strings = [name for name in action.option_strings if name not in hidden]
    return action


def add_data_dir_options(parser: argparse.ArgumentParser, default: str) -> None:
    """``--data-dir`` (old spelling ``--data``; ``args.data``) and ``--dataset``: a data folder
    and its layout, by default ``default``'s ``DATA_CONFIG``."""
    add_option(
        parser,
        "--data-dir",
        hidden=("--data",),
        dest="data",
        metavar="DATA_DIR",
        type=Path,
        help=f"dataset folder (default: {default}'s DATA_CONFIG)",
    )
    parser.add_argument(
        "--dataset",
        choices=DATASET_NAMES,
        help=f"layout of --data-dir (default: {default}'s DATA_CONFIG.dataset)",
    )


def check_output_folder(path: Path, option: str = "--output") -> None:
    """Refuse an output folder option that names an existing file (exit 2, nothing done)."""
    if path.exists() and not path.is_dir():
        raise UsageError(f"{option} {path} is a file: give a folder")


def add_config_arguments(parser: argparse.ArgumentParser) -> None:
    """``--config`` and repeated ``--set KEY=VALUE`` overrides."""
    parser.add_argument("--config", required=True, type=Path, help="YAML experiment config")
    parser.add_argument(
        "--set",
        action="append",
        metavar="SECTION.KEY=VALUE",
        help="override a config value, e.g. --set TRAIN_CONFIG.max_epochs=3 (repeatable)",
    )


def add_init_from_option(parser: argparse.ArgumentParser) -> None:
    """``--init-from CKPT``: ``TRAIN_CONFIG.init_checkpoint`` (read by
    :func:`load_config_from_args`)."""
    parser.add_argument(
        "--init-from",
        metavar="CKPT",
        help="fine-tune: start from this checkpoint's weights, with a fresh optimizer and "
        "schedule (TRAIN_CONFIG.init_checkpoint)",
    )


def load_config_from_args(args: argparse.Namespace) -> ExperimentConfig:
    """The config file of ``--config`` with every ``--set`` (then ``--init-from``) applied, its
    augmentations checked."""
    from skinet.augment.checks import check_config
    from skinet.config.experiment import load_config

    overrides = parse_overrides(args.set or [])
    if getattr(args, "init_from", None) is not None:
        overrides["TRAIN_CONFIG.init_checkpoint"] = args.init_from
    return check_config(load_config(args.config, overrides), str(args.config))
