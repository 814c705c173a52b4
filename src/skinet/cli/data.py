"""``skinet data verify|stats|download|cache``: argument parsing and one call per subcommand.

The main ``skinet`` CLI wires these in with :func:`add_data_subcommands`; this module also runs
on its own: ``python -m skinet.cli.data verify --config C``.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from skinet.cli.arguments import DATASET_NAMES, add_option
from skinet.config.errors import UsageError
from skinet.datasets.registry import DOWNLOADABLE
from skinet.imaging.errors import DatasetError, Problem
from skinet.runtime.console import console as wide_console

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from rich.console import Console


def add_data_subcommands(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Add ``data`` with its ``verify``, ``stats``, ``download`` and ``cache`` subcommands.

    Each leaf parser sets ``func`` to its handler, which takes the parsed namespace and returns
    the exit status.
    """
    data = subparsers.add_parser("data", help="verify, describe, download and cache datasets")
    commands = data.add_subparsers(dest="data_command", required=True)

    verify = commands.add_parser("verify", help="report every problem of a dataset, exit 1 if any")
    _add_source_args(verify)
    verify.add_argument(
        "--no-decode", action="store_true", help="only check pairing (skip decoding every file)"
    )
    verify.set_defaults(func=run_verify)

    stats = commands.add_parser("stats", help="per-channel mean/std of the training images")
    _add_source_args(stats)
    stats.add_argument(
        "--split", default="train", choices=("train", "val", "test", "all"), help="images to use"
    )
    stats.set_defaults(func=run_stats)

    download = commands.add_parser("download", help="download the official ISIC archives")
    download.add_argument("dataset", choices=DOWNLOADABLE)
    add_option(
        download,
        "--data-dir",
        hidden=("--dest",),
        dest="dest",
        metavar="DATA_DIR",
        default=None,
        help="target folder (default: data/ISIC2017 or data/ISIC2018, where "
        "configs/main_config.yaml looks)",
    )
    download.add_argument("--base-url", default=None, help="mirror replacing the ISIC S3 bucket")
    download.add_argument("--keep-archives", action="store_true", help="keep the zip files")
    download.set_defaults(func=run_download)

    cache = commands.add_parser("cache", help="list or clear the persistent preprocessed cache")
    action = cache.add_mutually_exclusive_group(required=True)
    action.add_argument("--list", action="store_true", help="show every cached split")
    action.add_argument("--clear", action="store_true", help="remove cached splits")
    cache.add_argument(
        "--older-than",
        type=float,
        default=None,
        metavar="DAYS",
        help="with --clear: only splits not used for this many days",
    )
    cache.add_argument(
        "--cache-dir",
        default=None,
        help="cache folder (default: $SKINET_CACHE_DIR, else $XDG_CACHE_HOME/skinet or "
        "~/.cache/skinet)",
    )
    cache.set_defaults(func=run_cache)
    return data


def _add_source_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", default=None, help="experiment YAML (uses its DATA_CONFIG)")
    parser.add_argument("--data-dir", default=None, help="dataset folder (instead of --config)")
    parser.add_argument("--dataset", default="isic2017", choices=DATASET_NAMES, help="layout name")
    parser.add_argument("--mask-suffix", default="_segmentation", help="folder layout only")
    parser.add_argument(
        "--set",
        action="append",
        metavar="SECTION.KEY=VALUE",
        help="override a value of --config, e.g. --set DATA_CONFIG.color_constancy=shades_of_gray",
    )


def _data_config(args: argparse.Namespace):  # -> DataConfig
    from skinet.cli.arguments import parse_overrides
    from skinet.config.data import DataConfig
    from skinet.config.experiment import load_config

    if getattr(args, "set", None) and not args.config:
        raise UsageError("--set overrides a config: give --config too")
    if args.config:
        data = load_config(args.config, parse_overrides(getattr(args, "set", None) or [])).data
        if args.data_dir:
            data = data.model_copy(update={"data_dir": args.data_dir})
        return data
    if not args.data_dir:
        raise UsageError("give --config or --data-dir")
    if args.dataset != "synthetic" and not Path(args.data_dir).is_dir():  # synthetic: made there
        raise UsageError(f"--data-dir {args.data_dir}: no such folder")
    return DataConfig(
        dataset=args.dataset,
        data_dir=str(Path(args.data_dir).resolve()),
        mask_suffix=args.mask_suffix,
    )


def run_verify(args: argparse.Namespace, console: Console | None = None) -> int:
    """Print every problem of the dataset; 0 when it is clean, 1 otherwise."""
    from skinet.datasets.locate import index_dataset
    from skinet.datasets.verify import verify_dataset

    console = console or wide_console()
    data = _data_config(args)
    problems = verify_dataset(data, decode=not args.no_decode)
    if problems:
        _print_problems(console, problems)
        return 1
    layouts_logger = logging.getLogger("skinet.datasets.layouts")
    level = layouts_logger.level
    layouts_logger.setLevel(logging.ERROR)  # the carving warning was already shown once
    try:
        _, splits = index_dataset(data)
    finally:
        layouts_logger.setLevel(level)
    sizes = ", ".join(f"{name} {len(pairs)}" for name, pairs in splits.items())
    console.print(f"[green]OK[/green] {data.dataset} dataset: {sizes}")
    return 0


def _print_problems(console: Console, problems: list[Problem]) -> None:
    from rich.markup import escape
    from rich.table import Table

    table = Table(title=f"{len(problems)} problem(s)", title_style="bold red")
    table.add_column("split")
    table.add_column("file", overflow="fold")
    table.add_column("problem", overflow="fold")
    for problem in problems:
        table.add_row(problem.split or "", escape(str(problem.path)), escape(problem.message))
    console.print(table)


def run_stats(args: argparse.Namespace, console: Console | None = None) -> int:
    """Print the mean/std of the chosen split's images as a ``DATA_CONFIG`` YAML block."""
    from skinet.datasets.locate import index_dataset
    from skinet.datasets.stats import compute_channel_stats
    from skinet.imaging.preprocess import build_preprocessing

    console = console or wide_console()
    data = _data_config(args)
    index, splits = index_dataset(data)
    names = list(splits) if args.split == "all" else [args.split]
    paths = [s.image_path for name in names for s in splits.get(name, [])]
    if not paths:
        raise DatasetError(f"no image/mask pairs in split {args.split!r} of {index.root}")
    stats = compute_channel_stats(paths, preprocessing=build_preprocessing(data))
    print(stats.to_yaml(), end="")
    if index.problems:  # e.g. images without a mask: not counted above
        log.warning(
            "%d problem(s) in %s left files out of these statistics (e.g. %s); skinet data "
            "verify lists every one",
            len(index.problems),
            index.root,
            index.problems[0],
        )
    return 0


def run_download(args: argparse.Namespace, console: Console | None = None) -> int:
    """Download, check and unpack the official archives of an ISIC dataset."""
    from rich.markup import escape

    from skinet.datasets.download import ISIC_BASE_URL, DownloadError, download_dataset
    from skinet.datasets.registry import LAYOUTS

    console = console or wide_console()
    dest = Path(args.dest or LAYOUTS[args.dataset].default_dir)
    try:
        download_dataset(
            args.dataset,
            dest,
            base_url=args.base_url or ISIC_BASE_URL,
            keep_archives=args.keep_archives,
        )
    except DownloadError as exc:
        console.print(f"[bold red]download failed:[/bold red] {escape(str(exc))}")
        return 1
    console.print(f"[green]OK[/green] {args.dataset} is in {escape(str(dest))}", soft_wrap=True)
    return 0


def run_cache(args: argparse.Namespace, console: Console | None = None) -> int:
    """``--list`` the cached splits as a table, or ``--clear`` them (``--older-than DAYS``)."""
    from datetime import datetime

    from skinet.datasets.cache import clear_cache, default_cache_dir, list_cache

    console = console or wide_console()
    if args.older_than is not None and not args.clear:
        raise UsageError("--older-than goes with --clear")
    if args.older_than is not None and args.older_than < 0:
        raise UsageError(f"--older-than must be >= 0 days, got {args.older_than}")
    cache_dir = Path(args.cache_dir).expanduser() if args.cache_dir else default_cache_dir()
    if args.clear:
        removed = clear_cache(cache_dir, args.older_than)
        freed = sum(e.nbytes for e in removed) / 2**20
        console.print(
            f"removed {len(removed)} cached split(s), {freed:.1f} MB, from {cache_dir}",
            markup=False,
            soft_wrap=True,
        )
        return 0
    entries = list_cache(cache_dir)
    # Plain aligned lines, not a table: nothing is cropped when piped, and they grep well.
    row = "{:<32}  {:<9}  {:<5}  {:>6}  {:>9}  {:<19}  {:<19}"
    print(f"{len(entries)} cached split(s) in {cache_dir}")
    if entries:
        print(row.format("key", "dataset", "split", "count", "size MB", "created", "last used"))
    for entry in entries:
        print(
            row.format(
                entry.key,
                entry.dataset if entry.complete else "(incomplete)",
                entry.split,
                entry.count,
                f"{entry.nbytes / 2**20:.1f}",
                entry.created[:19],
                datetime.fromtimestamp(entry.last_used).isoformat(timespec="seconds"),
            )
        )
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m skinet.cli.data``."""
    from rich.markup import escape

    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
    parser = argparse.ArgumentParser(prog="skinet")
    subparsers = parser.add_subparsers(dest="command", required=True)
    add_data_subcommands(subparsers)
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] != "data":
        argv = ["data", *argv]
    args = parser.parse_args(argv)
    try:
        return int(args.func(args))
    except UsageError as exc:
        parser.error(str(exc))  # exits 2, as argparse does for its own usage errors
    except DatasetError as exc:
        wide_console().print(f"[bold red]{escape(str(exc))}[/bold red]")
        return 1


if __name__ == "__main__":
    sys.exit(main())
