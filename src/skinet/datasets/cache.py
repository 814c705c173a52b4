"""The persistent preprocessed cache: a split's decoded pixels as memory-mapped ``.npy`` files.

A split is decoded and preprocessed once into ``<cache_dir>/<key>/images.npy`` (uint8
``N x S x S x 3``) and ``masks.npy`` (uint8 ``N x S x S``, values {0, 1}); ``manifest.json`` is
written last and marks the entry complete. The key is a SHA-256 over the cache format version,
every sample's paths, sizes and modification times, the full preprocessing (size, resize
mode, pad value, colour constancy, reduced JPEG decode) and the OpenCV version that decodes
(another libjpeg can decode other pixels), so any change makes a new entry.

Later runs, seeds, sweep trials and every DDP rank open the files read-only with
``np.load(mmap_mode="r")``: the operating system's page cache holds one copy for all of them,
and forked DataLoader workers share the same mapping. Writers take a file lock per key, so a
second process building the same split waits and then reuses the first one's files. Files are
written under temporary names and moved in with ``os.replace``; an entry whose manifest or
arrays do not match or cannot be read (a truncated or empty file, a manifest that is not UTF-8
JSON, a crash between writes) is rebuilt with a warning, and temporary files a killed build
left behind are removed under the lock before the next build.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import cv2
import numpy as np
from filelock import FileLock, Timeout

from skinet.config.data import DataConfig
from skinet.datasets.decoded import DecodedSplit, decode_split
from skinet.datasets.layouts import Sample
from skinet.imaging.preprocess import Preprocessing

logger = logging.getLogger(__name__)

CACHE_FORMAT_VERSION = 1
"""Bumped whenever the files or what the key covers change; old entries are then never hit."""
CACHE_DIR_ENV = "SKINET_CACHE_DIR"
"""Environment variable overriding the default cache folder."""
MANIFEST = "manifest.json"
IMAGES = "images.npy"
MASKS = "masks.npy"


class CorruptCacheError(ValueError):
    """An entry's files do not match its manifest (or the manifest is unreadable)."""


@dataclass(frozen=True)
class CacheEntry:
    """One cached split, as ``skinet data cache --list`` shows it."""

    key: str
    path: Path
    dataset: str
    split: str
    count: int
    nbytes: int
    created: str
    last_used: float
    complete: bool


def default_cache_dir() -> Path:
    """``$SKINET_CACHE_DIR``, else ``$XDG_CACHE_HOME/skinet``, else ``~/.cache/skinet``."""
    if os.environ.get(CACHE_DIR_ENV):
        return Path(os.environ[CACHE_DIR_ENV]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base).expanduser() / "skinet"


def resolve_cache_dir(data: DataConfig) -> Path | None:
    """The cache folder of ``DATA_CONFIG`` (``None`` when ``persistent_cache`` is off)."""
    if not data.persistent_cache:
        return None
    return Path(data.cache_dir).expanduser() if data.cache_dir else default_cache_dir()


def _file_stamp(path: Path) -> list[Any]:
    stat = path.stat()
    return [os.path.abspath(path), stat.st_size, stat.st_mtime_ns]


def compute_cache_key(samples: Sequence[Sample], preprocessing: Preprocessing) -> str:
    """The fingerprint of a split's pixels: samples (paths, sizes, mtimes) and preprocessing.

    Raises:
        OSError: a file cannot be stat'ed (the decode then reports it by name).
    """
    payload = {
        "format_version": CACHE_FORMAT_VERSION,
        "samples": [[s.id, *_file_stamp(s.image_path), *_file_stamp(s.mask_path)] for s in samples],
        "preprocessing": asdict(preprocessing),
        "steps": preprocessing.describe(),
        "decoder": f"opencv {cv2.__version__}",
    }
    encoded = json.dumps(payload, sort_keys=True, default=str).encode()
    return hashlib.sha256(encoded).hexdigest()[:32]


def _expected_shapes(count: int, size: int) -> dict[str, tuple[int, ...]]:
    return {IMAGES: (count, size, size, 3), MASKS: (count, size, size)}


def open_entry(entry: Path, key: str, count: int, size: int) -> tuple[np.ndarray, np.ndarray]:
    """The read-only memmaps of a complete entry.

    Raises:
        FileNotFoundError: no manifest (absent, or still being written).
        CorruptCacheError: manifest or arrays do not match what ``key`` should hold.
    """
    try:
        manifest = json.loads((entry / MANIFEST).read_text())
    except ValueError as exc:  # not JSON, or not UTF-8 (UnicodeDecodeError)
        raise CorruptCacheError(f"unreadable manifest ({exc})") from exc
    if not isinstance(manifest, dict):
        raise CorruptCacheError("manifest is not a JSON object")
    if manifest.get("format_version") != CACHE_FORMAT_VERSION or manifest.get("key") != key:
        raise CorruptCacheError("manifest is for another key or cache format")
    arrays = []
    for name, shape in _expected_shapes(count, size).items():
        path = entry / name
        try:
            array = np.load(path, mmap_mode="r", allow_pickle=False)
        except (OSError, ValueError, EOFError) as exc:  # EOFError: an empty file
            raise CorruptCacheError(f"{name}: {exc or type(exc).__name__}") from exc
        if not isinstance(array, np.memmap) or array.dtype != np.uint8 or array.shape != shape:
            raise CorruptCacheError(
                f"{name} holds {getattr(array, 'dtype', '?')} {getattr(array, 'shape', '?')}, "
                f"expected uint8 {shape}"
            )
        if path.stat().st_size != array.offset + array.nbytes:
            raise CorruptCacheError(f"{name} is {path.stat().st_size} bytes, expected more")
        arrays.append(array)
    return arrays[0], arrays[1]


def _touch(path: Path) -> None:
    # The manifest's mtime is the entry's "last used"; a read-only cache folder still serves hits.
    with contextlib.suppress(OSError):
        os.utime(path)


def load_or_build_split(
    samples: Sequence[Sample],
    preprocessing: Preprocessing,
    cache_dir: Path,
    *,
    split: str,
    dataset: str = "",
    lock_timeout: float = -1,
) -> DecodedSplit:
    """A split's pixels from the cache, decoding and writing them first when absent.

    Returns the same :class:`~skinet.datasets.decoded.DecodedSplit` as
    :func:`~skinet.datasets.decoded.decode_split` with ``keep=True``; the arrays are read-only
    memmaps. A split with problems is not cached (its problems are returned, nothing is
    written). ``lock_timeout`` bounds the wait for another writer (seconds; -1: forever).
    """
    size = preprocessing.image_size
    if size is None:
        raise ValueError("the disk cache needs an image_size (the side of the cached arrays)")
    try:
        key = compute_cache_key(samples, preprocessing)
    except OSError:
        # A file vanished or is unreadable: decode without the cache so it is reported by name.
        return decode_split(samples, preprocessing, keep=True, split=split)
    entry = cache_dir / key
    count = len(samples)
    try:
        images, masks = open_entry(entry, key, count, size)
        _touch(entry / MANIFEST)
        logger.info("%s split: %d samples from the disk cache %s", split, count, entry)
        return DecodedSplit(images, masks, [])
    except CorruptCacheError as exc:
        logger.warning("disk cache %s is corrupt (%s); rebuilding it", entry, exc)
    except OSError:
        pass  # absent or still being written (no manifest): build it, or wait for its writer
    try:
        cache_dir.mkdir(parents=True, exist_ok=True)
        with FileLock(str(cache_dir / f"{key}.lock"), timeout=lock_timeout):
            try:  # another process may have finished it while this one waited
                images, masks = open_entry(entry, key, count, size)
                _touch(entry / MANIFEST)
                return DecodedSplit(images, masks, [])
            except (OSError, CorruptCacheError):
                pass
            return _build_entry(entry, key, samples, preprocessing, split, dataset)
    except OSError as exc:  # a full disk, a read-only or unreachable cache folder, ...
        logger.warning("disk cache %s unusable (%s); decoding %s into RAM", cache_dir, exc, split)
        return decode_split(samples, preprocessing, keep=True, split=split)


def _build_entry(
    entry: Path,
    key: str,
    samples: Sequence[Sample],
    preprocessing: Preprocessing,
    split: str,
    dataset: str,
) -> DecodedSplit:
    """Decode into temporary memmaps in ``entry``, move them in, then write the manifest."""
    assert preprocessing.image_size is not None
    entry.mkdir(parents=True, exist_ok=True)
    (entry / MANIFEST).unlink(missing_ok=True)  # the entry is incomplete from here on
    for stale in entry.glob(".*.tmp"):  # left by a build that was killed (the lock is ours)
        stale.unlink(missing_ok=True)
    shapes = _expected_shapes(len(samples), preprocessing.image_size)
    temps = {name: _temp_name(entry, name) for name in shapes}
    try:
        out = {
            name: np.lib.format.open_memmap(temps[name], mode="w+", dtype=np.uint8, shape=shape)
            for name, shape in shapes.items()
        }
        started = time.perf_counter()
        decoded = decode_split(
            samples,
            preprocessing,
            keep=True,
            split=split,
            out=(out[IMAGES], out[MASKS]),
        )
        if decoded.problems:
            return DecodedSplit(None, None, decoded.problems)
        for array in out.values():
            array.flush()
        del out, decoded
        for name, temp in temps.items():
            os.replace(temp, entry / name)
        nbytes = sum((entry / name).stat().st_size for name in shapes)
        manifest = {
            "format_version": CACHE_FORMAT_VERSION,
            "key": key,
            "dataset": dataset,
            "split": split,
            "count": len(samples),
            "image_size": preprocessing.image_size,
            "preprocessing": asdict(preprocessing),
            "first_image": str(samples[0].image_path) if samples else None,
            "nbytes": nbytes,
            "created": datetime.now(UTC).isoformat(timespec="seconds"),
        }
        temp = _temp_name(entry, MANIFEST)
        Path(temp).write_text(json.dumps(manifest, indent=2))
        os.replace(temp, entry / MANIFEST)
    finally:
        for temp in temps.values():
            Path(temp).unlink(missing_ok=True)
    logger.info(
        "%s split: decoded %d samples in %.1f s into the disk cache %s (%.1f MB)",
        split,
        len(samples),
        time.perf_counter() - started,
        entry,
        nbytes / 2**20,
    )
    images, masks = open_entry(entry, key, len(samples), preprocessing.image_size)
    return DecodedSplit(images, masks, [])


def _temp_name(folder: Path, name: str) -> str:
    handle, temp = tempfile.mkstemp(prefix=f".{name}.", suffix=".tmp", dir=folder)
    os.close(handle)
    return temp


def list_cache(cache_dir: Path) -> list[CacheEntry]:
    """Every entry under ``cache_dir``, complete or not, most recently used first."""
    if not cache_dir.is_dir():
        return []
    entries = []
    for folder in sorted(p for p in cache_dir.iterdir() if p.is_dir()):
        manifest_path = folder / MANIFEST
        try:
            manifest = json.loads(manifest_path.read_text())
            complete = isinstance(manifest, dict)
        except (OSError, ValueError):  # absent, not JSON or not UTF-8: an incomplete entry
            manifest, complete = {}, False
        nbytes = sum(p.stat().st_size for p in folder.iterdir() if p.is_file())
        stamp = manifest_path if manifest_path.exists() else folder
        entries.append(
            CacheEntry(
                key=folder.name,
                path=folder,
                dataset=str(manifest.get("dataset", "")) if complete else "",
                split=str(manifest.get("split", "")) if complete else "",
                count=int(manifest.get("count", 0)) if complete else 0,
                nbytes=nbytes,
                created=str(manifest.get("created", "")) if complete else "",
                last_used=stamp.stat().st_mtime,
                complete=complete,
            )
        )
    return sorted(entries, key=lambda e: e.last_used, reverse=True)


def clear_cache(cache_dir: Path, older_than_days: float | None = None) -> list[CacheEntry]:
    """Remove entries (all, or those unused for ``older_than_days``); returns those removed.

    An entry another process is writing (its lock is held) is left alone. Lock files stay: one
    removed while another process waits on it would let two writers in.
    """
    cutoff = None if older_than_days is None else time.time() - older_than_days * 86400
    removed = []
    for entry in list_cache(cache_dir):
        if cutoff is not None and entry.last_used >= cutoff:
            continue
        lock = FileLock(str(cache_dir / f"{entry.key}.lock"), timeout=0)
        try:
            with lock:
                shutil.rmtree(entry.path)
        except Timeout:
            logger.warning("cache entry %s is being written; left in place", entry.path)
            continue
        removed.append(entry)
    return removed
