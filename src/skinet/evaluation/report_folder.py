"""What ``skinet evaluate`` owns in its ``--output`` folder, and clearing it before a new run.

An evaluation writes :data:`REPORT_FILES` into ``--output`` and, for each ``--external NAME``
set, the same files into ``--output/NAME``. A folder used before would otherwise keep the old
run's gallery or a set it no longer scores beside the new reports. Only those files go: a file
SkiNet did not write, or a folder that is not one of its sets, is left as it is.
"""

from __future__ import annotations

import contextlib
import json
import logging
from pathlib import Path
from typing import Any

from skinet.evaluation.evaluate import HISTOGRAM_FILE, PER_IMAGE_FILE, SUMMARY_FILE
from skinet.evaluation.gallery import GALLERY_FILE

log = logging.getLogger(__name__)

REPORT_FILES = (SUMMARY_FILE, PER_IMAGE_FILE, HISTOGRAM_FILE, GALLERY_FILE)
"""The files one evaluated set writes (``summary.json`` first: it goes first, so a report
interrupted while it is cleared never looks complete)."""

_SIGNATURE = ("num_failed", "jaccard_cutoff", "failures")
"""Keys every ``summary.json`` of ``skinet evaluate`` holds."""


def read_report_summary(folder: Path) -> dict[str, Any] | None:
    """The ``summary.json`` of ``folder`` if ``skinet evaluate`` wrote it, else ``None``."""
    try:
        summary = json.loads((folder / SUMMARY_FILE).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(summary, dict) or not all(key in summary for key in _SIGNATURE):
        return None
    return summary


def earlier_sets(folder: Path) -> list[Path]:
    """The subfolders of ``folder`` that hold an earlier run's ``--external`` set: a report of
    SkiNet's whose set has the folder's name (``evaluated``)."""
    if not folder.is_dir():
        return []
    found = []
    for sub in sorted(folder.iterdir()):
        if sub.is_dir() and not sub.is_symlink():
            summary = read_report_summary(sub)
            if summary is not None and summary.get("evaluated") == sub.name:
                found.append(sub)
    return found


def clear_reports(folder: Path) -> list[Path]:
    """Remove what an earlier ``skinet evaluate`` wrote into ``folder``: its report files and
    its ``--external`` sets' folders (their report files; a folder left empty goes too).

    Returns:
        The files removed.
    """
    removed: list[Path] = []
    for sub in earlier_sets(folder):
        removed += _remove_report_files(sub)
        with contextlib.suppress(OSError):  # not empty: it holds files SkiNet did not write
            sub.rmdir()
    if read_report_summary(folder) is not None:
        removed += _remove_report_files(folder)
    if removed:
        log.info("removed %d report file(s) of an earlier evaluation in %s", len(removed), folder)
    return removed


def _remove_report_files(folder: Path) -> list[Path]:
    removed = []
    for name in REPORT_FILES:
        path = folder / name
        if path.is_file() or path.is_symlink():
            path.unlink()
            removed.append(path)
    return removed
