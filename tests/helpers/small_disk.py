"""A small filesystem that really fills up: a tmpfs of a few megabytes mounted for one test.

Mounting needs root (CI runs as root); elsewhere, or where the kernel refuses the mount (a
container without the capability), the test is skipped with the reason.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest


@contextmanager
def small_disk(folder: Path, size: str) -> Iterator[Path]:
    """``folder`` as a tmpfs of ``size`` (``"3m"``), unmounted (and its contents gone) after."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs to fill needs root (CI runs as root)")
    folder.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)],
        capture_output=True,
        text=True,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip() or mounted.returncode}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "--lazy", str(folder)], check=False)


def fill(folder: Path) -> None:
    """Write into ``folder`` until its filesystem has not one byte left."""
    handle = os.open(folder / "filler", os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    try:
        for chunk in (1 << 16, 512, 1):
            try:
                while os.write(handle, b"\0" * chunk):
                    pass
            except OSError:
                continue
    finally:
        os.close(handle)
