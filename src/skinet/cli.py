"""The ``skinet`` command line: argument parsing only, one function call per subcommand."""

from __future__ import annotations

import argparse
import contextlib
import importlib
import logging
import sys
import warnings
from collections.abc import Callable, Sequence
from typing import Any

from skinet import __version__
from skinet.config import ConfigError, ExperimentConfig, UsageError, load_config
from skinet.config.arguments import add_config_arguments, parse_overrides
from skinet.tracking import TrackingError
from skinet.training.signals import RunInterrupted

log = logging.getLogger("skinet")

Handler = Callable[[argparse.Namespace], int]


def load_config_from_args(args: argparse.Namespace) -> ExperimentConfig:
    """The config file of ``--config`` with every ``--set`` applied."""
    return load_config(args.config, parse_overrides(args.set or []))


def _run_train(args: argparse.Namespace) -> int:
    from skinet.reporting import print_run_summary
    from skinet.training.run import run_training

    cfg = load_config_from_args(args)
    result = run_training(cfg, visualize=not args.no_visualize, resume=args.resume)
    print_run_summary(cfg, result)
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The argument parser; each leaf subcommand sets ``func``, its handler."""
    parser = argparse.ArgumentParser(
        prog="skinet", description="Skin-lesion segmentation: train, sweep and evaluate UNet2D."
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    parser.add_argument("--version", action="version", version=f"skinet {__version__}")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    train = subparsers.add_parser("train", help="train, validate and test one model")
    add_config_arguments(train)
    train.add_argument(
        "--resume", metavar="PATH|last", help="continue from a checkpoint, or the newest last.ckpt"
    )
    train.add_argument(
        "--no-visualize", action="store_true", help="skip the augmented-samples grid"
    )
    train.set_defaults(func=_run_train)

    for register in _subcommand_groups():
        register(subparsers)
    _add_verbose_to_subcommands(subparsers)
    return parser


def _add_verbose_to_subcommands(subparsers: argparse._SubParsersAction) -> None:
    """Accept ``-v`` after the subcommand too (``skinet train -v``), at every level."""
    for sub in subparsers.choices.values():
        # SUPPRESS: a subcommand without -v leaves the top-level value alone.
        sub.add_argument(
            "-v", "--verbose", action="store_true", default=argparse.SUPPRESS, help="debug logging"
        )
        for action in sub._actions:
            if isinstance(action, argparse._SubParsersAction):
                _add_verbose_to_subcommands(action)


def _subcommand_groups() -> list[Callable[[Any], Any]]:
    """Subcommand groups defined next to the code they drive."""
    from skinet.config.cli import add_config_subcommands
    from skinet.data.cli import add_data_subcommands
    from skinet.inference.cli import add_inference_subcommands
    from skinet.info import add_info_subcommand
    from skinet.sweep.cli import add_sweep_subcommands

    return [
        add_data_subcommands,
        add_sweep_subcommands,
        add_inference_subcommands,
        add_config_subcommands,
        add_info_subcommand,
    ]


def configure_logging(verbose: bool = False) -> None:
    """Rich console logging for ``skinet`` and quieter third-party loggers."""
    from rich.logging import RichHandler

    root = logging.getLogger()
    root.setLevel(logging.DEBUG if verbose else logging.INFO)
    if not any(isinstance(h, RichHandler) for h in root.handlers):
        handler = RichHandler(rich_tracebacks=False, show_path=False, log_time_format="[%X]")
        handler.setFormatter(logging.Formatter("%(message)s"))
        handler.addFilter(_drop_advertisements)
        root.addHandler(handler)
    # Both configure their loggers at import; import them first so the settings below stick.
    # Either may be missing: MLflow is not needed to predict or train untracked, and
    # ``skinet info`` must still run to say what is missing.
    for module in ("lightning.pytorch", "mlflow"):
        with contextlib.suppress(ImportError):
            importlib.import_module(module)

    for noisy in ("alembic", "mlflow", "urllib3", "matplotlib", "PIL"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    # Lightning attaches its own stream handlers; route its records through the one above.
    for name in ("lightning", "lightning.pytorch", "lightning.fabric"):
        lightning_logger = logging.getLogger(name)
        lightning_logger.handlers.clear()
        lightning_logger.propagate = True
    # Raised inside Lightning by torch>=2.10; nothing a user can act on.
    warnings.filterwarnings("ignore", message=r".*LeafSpec.*is deprecated")


def _command_line(args: argparse.Namespace) -> str:
    """``skinet data verify`` for the subcommand that ran."""
    words = [getattr(args, name, None) for name in ("command", "data_command", "config_command")]
    return " ".join(["skinet", *(w for w in words if isinstance(w, str))])


def _drop_advertisements(record: logging.LogRecord) -> bool:
    """Drop Lightning's tips about optional cloud services."""
    return "Tip:" not in record.getMessage()


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``skinet`` console script; usage and config errors exit with 2."""
    args = build_parser().parse_args(argv)
    configure_logging(args.verbose)
    handler: Handler = args.func
    try:
        return handler(args)
    except UsageError as error:
        log.error("%s (see %s --help)", error, _command_line(args))
        return 2
    except (ConfigError, FileNotFoundError) as error:
        log.error("%s", error)
        return 2
    except TrackingError as error:
        log.error("%s", error)
        return 1
    except RunInterrupted as error:
        log.error("%s: the MLflow run is KILLED; continue with --resume last", error)
        return error.exit_code
    except ValueError as error:
        # Data, resume and sweep problems are ValueErrors with a message meant for the user.
        if args.verbose:
            raise
        log.error("%s", error)
        return 1


if __name__ == "__main__":
    sys.exit(main())
