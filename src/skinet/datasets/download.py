"""Downloading and unpacking a layout's official archives (the ISIC challenge zips).

Which archives a layout has is its ``download`` in :mod:`skinet.datasets.registry`.

Downloads resume where an interrupted one stopped (HTTP ``Range``), are checked against the
size the server announced (and a SHA-256 where one is recorded), and are unpacked into the
layout the readers expect. A finished archive leaves a marker, so re-running skips it.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
import urllib.error
import urllib.request
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from skinet.datasets.registry import Archive, get_layout
from skinet.runtime.files import file_sha256

logger = logging.getLogger(__name__)

ISIC_BASE_URL = "https://isic-challenge-data.s3.amazonaws.com"
CHUNK_BYTES = 1 << 20


class DownloadError(RuntimeError):
    """A download failed, or the file received is not the expected archive."""


ProgressFn = Callable[[int, int | None], None]
"""Called with (bytes so far, total bytes or None)."""


def archive_urls(dataset: str, base_url: str = ISIC_BASE_URL) -> list[tuple[str, Archive]]:
    """``(url, archive)`` of every official archive of ``dataset``.

    Raises:
        ValueError: ``dataset`` is not a layout, or has no download (the message says why).
    """
    layout = get_layout(dataset)
    if layout.download is None:
        raise ValueError(f"dataset {dataset!r} has no download: {layout.no_download}")
    base = f"{base_url.rstrip('/')}/{layout.download.subfolder}"
    return [(f"{base}/{a.filename}", a) for a in layout.download.archives]


def download_file(
    url: str,
    dest: Path,
    *,
    sha256: str | None = None,
    progress: ProgressFn | None = None,
    timeout: float = 60.0,
) -> Path:
    """Download ``url`` to ``dest``, resuming a partial ``dest.part`` with an HTTP Range request.

    Raises:
        DownloadError: HTTP failure, size different from the announced one, or checksum mismatch.
    """
    part = dest.with_name(dest.name + ".part")
    dest.parent.mkdir(parents=True, exist_ok=True)
    have = part.stat().st_size if part.exists() else 0
    request = urllib.request.Request(url)
    if have:
        request.add_header("Range", f"bytes={have}-")
    try:
        response = urllib.request.urlopen(request, timeout=timeout)
    except urllib.error.HTTPError as exc:
        if exc.code == 416 and have:  # range not satisfiable: the part file is already complete
            part.replace(dest)
            return _check_sha256(dest, sha256)
        raise DownloadError(f"downloading {url} failed: HTTP {exc.code} {exc.reason}") from None
    except (urllib.error.URLError, OSError) as exc:
        raise DownloadError(f"downloading {url} failed: {exc}") from None
    with response:
        total: int | None = None
        if response.status == 206:
            content_range = response.headers.get("Content-Range", "")
            if not content_range.startswith(f"bytes {have}-"):
                raise DownloadError(f"{url}: server answered an unexpected range {content_range!r}")
            size = content_range.rsplit("/", 1)[-1]
            total = int(size) if size.isdigit() else None
            mode = "ab"
            logger.info("resuming %s at %d bytes", url, have)
        else:  # the server ignored the Range header: start again
            have = 0
            mode = "wb"
            length = response.headers.get("Content-Length")
            total = int(length) if length and length.isdigit() else None
        with open(part, mode) as handle:
            done = have
            while chunk := response.read(CHUNK_BYTES):
                handle.write(chunk)
                done += len(chunk)
                if progress is not None:
                    progress(done, total)
    if total is not None and done != total:
        raise DownloadError(
            f"{url}: received {done} bytes but the server announced {total}; re-run to resume"
        )
    part.replace(dest)
    return _check_sha256(dest, sha256)


def _check_sha256(path: Path, expected: str | None) -> Path:
    if expected is None:
        return path
    found = file_sha256(path)
    if found != expected.lower():
        path.unlink()
        raise DownloadError(
            f"{path}: SHA-256 {found} does not match the expected {expected}; "
            "the file was deleted, re-run to download it again"
        )
    return path


def extract_archive(zip_path: Path, dest_root: Path, folder: str) -> Path:
    """Check every member's CRC, then unpack ``zip_path`` so that ``dest_root/folder`` exists.

    Archives holding ``folder/...`` are unpacked as they are; archives holding bare files are
    unpacked into ``folder``. Unpacking goes through a temporary folder and a rename.

    Raises:
        DownloadError: the archive is not a zip, or a member is corrupt.
    """
    try:
        with zipfile.ZipFile(zip_path) as archive:
            bad = archive.testzip()
            if bad is not None:
                raise DownloadError(
                    f"{zip_path} is corrupt (bad CRC in {bad}); delete it and download again"
                )
            tmp = Path(tempfile.mkdtemp(prefix=".extract-", dir=dest_root))
            try:
                names = [n for n in archive.namelist() if not n.startswith("__MACOSX/")]
                for name in names:
                    target = (tmp / name).resolve()
                    if not target.is_relative_to(tmp.resolve()):
                        raise DownloadError(f"{zip_path}: member {name!r} escapes the archive")
                archive.extractall(tmp, members=names)
                source = tmp / folder if (tmp / folder).is_dir() else tmp
                target_dir = dest_root / folder
                shutil.rmtree(target_dir, ignore_errors=True)
                source.replace(target_dir)
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
    except (zipfile.BadZipFile, EOFError, zipfile.LargeZipFile, OSError) as exc:
        raise DownloadError(
            f"{zip_path} is not a valid zip archive ({exc}); delete it and download again"
        ) from None
    return dest_root / folder


def download_dataset(
    dataset: str,
    dest_root: str | Path,
    *,
    base_url: str = ISIC_BASE_URL,
    keep_archives: bool = False,
    show_progress: bool = True,
) -> Path:
    """Download and unpack every official archive of ``dataset`` into ``dest_root``.

    Archives already unpacked (marker present) are skipped; interrupted downloads resume.

    Returns:
        ``dest_root``, ready for the ``dataset`` reader.
    """
    dest_root = Path(dest_root)
    downloads = dest_root / "downloads"
    dest_root.mkdir(parents=True, exist_ok=True)
    for url, archive in archive_urls(dataset, base_url):
        marker = dest_root / archive.folder / ".complete"
        if marker.is_file():
            logger.info("%s already present, skipping", archive.folder)
            continue
        zip_path = downloads / archive.filename
        if not zip_path.is_file():
            with _progress(archive.filename, show_progress) as progress:
                download_file(url, zip_path, sha256=archive.sha256, progress=progress)
        extract_archive(zip_path, dest_root, archive.folder)
        marker.write_text(url + "\n")
        if not keep_archives:
            zip_path.unlink()
    if downloads.is_dir() and not any(downloads.iterdir()):
        downloads.rmdir()
    return dest_root


class _progress:
    """A rich progress bar fed by :data:`ProgressFn` calls (or nothing when disabled)."""

    def __init__(self, name: str, enabled: bool) -> None:
        self.name = name
        self.enabled = enabled
        self._bar: Any = None
        self._task: Any = None

    def __enter__(self) -> ProgressFn | None:
        if not self.enabled:
            return None
        from rich.progress import (
            BarColumn,
            DownloadColumn,
            Progress,
            TransferSpeedColumn,
        )

        self._bar = Progress(
            "[progress.description]{task.description}",
            BarColumn(),
            DownloadColumn(),
            TransferSpeedColumn(),
        )
        self._bar.start()
        self._task = self._bar.add_task(self.name, total=None)

        def update(done: int, total: int | None) -> None:
            assert self._bar is not None and self._task is not None
            self._bar.update(self._task, completed=done, total=total)

        return update

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.stop()
