"""The ``skinet`` command line: argument parsing only, one function call per subcommand."""

from __future__ import annotations

import argparse
import contextlib
import importlib
import logging
import sys
import threading
import warnings
from collections.abc import Callable, Sequence
from typing import Any

from skinet import __version__
from skinet.cli.arguments import Handler
from skinet.cli.compare import add_compare_subcommand
from skinet.cli.config import add_config_subcommands
from skinet.cli.data import add_data_subcommands
from skinet.cli.evaluation_options import add_evaluate_subcommand
from skinet.cli.experiments import add_experiment_subcommands
from skinet.cli.extras import (
    MissingExtraError,
    as_missing_extra,
    check_requirements,
    required_modules,
)
from skinet.cli.inference import add_export_subcommand, add_predict_subcommand
from skinet.cli.info import add_info_subcommand
from skinet.cli.parser import SkinetArgumentParser
from skinet.cli.robustness import add_robustness_subcommand
from skinet.cli.training import add_training_subcommands
from skinet.config.errors import ConfigError, UsageError
from skinet.tracking.mlflow_utils import TrackingError
from skinet.training.signals import RunInterrupted

log = logging.getLogger("skinet")

INTERRUPTED_EXIT = 130
"""The shell's status for a command stopped by SIGINT (128 + 2)."""

SUBCOMMAND_GROUPS: tuple[Callable[[Any], Any], ...] = (
    add_training_subcommands,
    add_data_subcommands,
    add_experiment_subcommands,
    add_predict_subcommand,
    add_evaluate_subcommand,
    add_compare_subcommand,
    add_robustness_subcommand,
    add_export_subcommand,
    add_config_subcommands,
    add_info_subcommand,
)
"""Each subcommand group's registration function, in ``--help`` order. Every function takes the
top-level subparsers and adds its subcommands, each setting ``func`` to its handler; a handler
imports what it runs (Lightning, MLflow, Optuna) only when it runs."""


def build_parser() -> argparse.ArgumentParser:
    """The argument parser; each leaf subcommand sets ``func``, its handler."""
    parser = SkinetArgumentParser(
        prog="skinet", description="Skin-lesion segmentation: train, sweep and evaluate UNet2D."
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    parser.add_argument("--version", action="version", version=f"skinet {__version__}")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for register in SUBCOMMAND_GROUPS:
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


def configure_logging(verbose: bool = False, training: bool = True) -> None:
    """Console logging for ``skinet`` (rich on a terminal, a plain line per record in a log file)
    and quieter third-party loggers.

    Args:
        verbose: Debug level instead of info.
        training: Also tame Lightning's and MLflow's loggers, which imports both (when
            installed); prediction leaves them unimported.
    """
    root = logging.getLogger()
    root.setLevel(logging.DEBUG if verbose else logging.INFO)
    if not any(getattr(h, "skinet", False) for h in root.handlers):
        handler = _log_handler()
        handler.skinet = True  # type: ignore[attr-defined]
        handler.addFilter(_drop_advertisements)
        root.addHandler(handler)
    # Both configure their loggers at import; import them first so the settings below stick.
    # Either may be missing: MLflow is not needed to train untracked, and ``skinet info`` must
    # still run to say what is missing.
    for module in ("lightning.pytorch", "mlflow") if training else ():
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
    # The model summary's size estimate under bf16-mixed: it counts the float32 weights anyway.
    warnings.filterwarnings("ignore", message=r"Precision .* is not supported by the model summary")


class LogLineHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """A record per line on the standard output of the moment, never wrapped: for log files and
    pipes, where rich would wrap at 80 columns and split paths."""

    def __init__(self) -> None:
        super().__init__()
        self.setFormatter(logging.Formatter("[%(asctime)s] %(levelname)-8s %(message)s", "%X"))

    @property  # type: ignore[override]
    def stream(self) -> Any:
        return sys.stdout  # as it is now: a test or a caller may have replaced it

    @stream.setter
    def stream(self, value: Any) -> None:
        pass

    def handleError(self, record: logging.LogRecord) -> None:  # noqa: N802 (logging's name)
        """A gone reader (``skinet train | head``) ends the command at this line
        (:mod:`skinet.runtime.pipes`), not with logging's ``--- Logging error ---`` traceback
        for this record and every one after it. A thread other than the main one drops its
        record: the main thread's next line ends the command."""
        from skinet.runtime.pipes import close_output_for

        error = sys.exc_info()[1]
        if isinstance(error, BrokenPipeError):
            if threading.current_thread() is not threading.main_thread():
                return
            close_output_for(error)
        super().handleError(record)


def _log_handler() -> logging.Handler:
    """Rich's handler where rich draws (a terminal, Jupyter), else :class:`LogLineHandler`."""
    from rich.logging import RichHandler

    from skinet.runtime.console import draws

    if not draws():
        return LogLineHandler()
    handler = RichHandler(rich_tracebacks=False, show_path=False, log_time_format="[%X]")
    handler.setFormatter(logging.Formatter("%(message)s"))
    return handler


def _command_line(args: argparse.Namespace) -> str:
    """``skinet data verify`` for the subcommand that ran."""
    words = [getattr(args, name, None) for name in ("command", "data_command", "config_command")]
    return " ".join(["skinet", *(w for w in words if isinstance(w, str))])


def _drop_advertisements(record: logging.LogRecord) -> bool:
    """Drop Lightning's tips about optional cloud services."""
    return "Tip:" not in record.getMessage()


_REPORTED = (
    MissingExtraError,
    ModuleNotFoundError,
    UsageError,
    ConfigError,
    FileNotFoundError,
    TrackingError,
    RunInterrupted,
    KeyboardInterrupt,
    ValueError,
)
"""What :func:`main` reports as one line and an exit status instead of a traceback."""


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``skinet`` console script.

    Exit status 2: usage and config errors, and a subcommand whose pip extra is not installed
    (``skinet[train]``, ``skinet[onnx]``); 1: a run that failed (data, tracking, resume); 130:
    interrupted by Ctrl-C (143 for a training run stopped by SIGTERM).
    """
    args = build_parser().parse_args(argv)
    handler: Handler = args.func
    try:
        # Imports Lightning and MLflow for a training command: seconds in which Ctrl-C is
        # reported like any other (its handler is installed before those imports).
        configure_logging(args.verbose, training=bool(required_modules(handler)))
        check_requirements(handler, _command_line(args))
        return handler(args)
    except _REPORTED as error:
        status = _report(error, args)
        if status is None:
            raise
        return status


def _report(error: BaseException, args: argparse.Namespace) -> int | None:
    """Log ``error`` as one line and return the exit status; None to raise it as it is.

    Checked in the order of :data:`_REPORTED`, the first type that matches decides.
    """
    if isinstance(error, MissingExtraError | ModuleNotFoundError):
        return _report_missing_module(error, args)
    if isinstance(error, UsageError):
        log.error("%s (see %s --help)", error, _command_line(args))
        return 2
    if isinstance(error, ConfigError | FileNotFoundError):
        log.error("%s", error)
        return 2
    if isinstance(error, TrackingError):
        log.error("%s", error)
        return 1
    if isinstance(error, RunInterrupted):
        killed = "the MLflow run is KILLED; " if error.mlflow_killed else ""
        if error.last_checkpoint is not None:
            log.error("%s: %scontinue with --resume last", error, killed)
        else:
            log.error(
                "%s before its first epoch ended: %sthere is no checkpoint to resume; run the "
                "command again to start over",
                error,
                killed,
            )
        return error.exit_code
    if isinstance(error, KeyboardInterrupt):
        # Ctrl-C outside a training run (evaluate, predict, compare, ...): one line, not a
        # traceback; the handler may say what it left (str(error)).
        detail = f": {error}" if str(error) else ""
        log.error("%s interrupted (Ctrl-C)%s", _command_line(args), detail)
        return INTERRUPTED_EXIT
    # ValueError: data, resume and sweep problems carry a message meant for the user.
    if args.verbose:
        return None
    log.error("%s", error)
    return 1


def _report_missing_module(
    error: MissingExtraError | ModuleNotFoundError, args: argparse.Namespace
) -> int | None:
    """A subcommand whose pip extra is not installed: exit status 2."""
    if isinstance(error, MissingExtraError):
        log.error("%s", error)
        return 2
    # An extra's module imported deeper than the handler declares (MLflow with tracking on).
    missing = as_missing_extra(error, _command_line(args))
    if missing is None:
        return None
    log.error("%s", missing)
    return 2


if __name__ == "__main__":
    sys.exit(main())
