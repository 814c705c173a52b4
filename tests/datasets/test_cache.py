"""The persistent preprocessed cache: hits, keys, corruption, concurrent writers and the CLI."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import textwrap
import time
from dataclasses import replace
from pathlib import Path

import cv2
import numpy as np
import pytest

from skinet.cli.main import main as skinet_main
from skinet.config.experiment import parse_config
from skinet.datasets import decoded as dataset_module
from skinet.datasets.cache import (
    IMAGES,
    MANIFEST,
    MASKS,
    compute_cache_key,
    list_cache,
    load_or_build_split,
)
from skinet.datasets.decoded import decode_split
from skinet.datasets.registry import read_layout
from skinet.imaging.decode import jpeg_reduction, jpeg_size, load_pair
from skinet.imaging.preprocess import Preprocessing
from skinet.training.data.loaders import build_dataloaders

SRC = Path(__file__).resolve().parents[2] / "src"


def _train_samples(root: Path):
    return read_layout(root, "isic2017").splits["train"]


def _forbid_decoding(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args, **kwargs):
        raise AssertionError("decoded a pair although the split is cached")

    monkeypatch.setattr(dataset_module, "load_pair", refuse)


def test_cache_hit_equals_fresh_decode_and_decodes_nothing(
    isic2017_tree: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    samples = _train_samples(isic2017_tree)
    spec = Preprocessing(32, "letterbox", "shades_of_gray", 7)
    fresh = decode_split(samples, spec, keep=True, split="train")
    first = load_or_build_split(samples, spec, tmp_path / "cache", split="train")
    _forbid_decoding(monkeypatch)
    second = load_or_build_split(samples, spec, tmp_path / "cache", split="train")
    assert isinstance(second.images, np.memmap) and not second.images.flags.writeable
    for decoded in (first, second):
        np.testing.assert_array_equal(decoded.images, fresh.images)
        np.testing.assert_array_equal(decoded.masks, fresh.masks)
    assert len(list((tmp_path / "cache").iterdir())) == 2  # one entry and its lock file


def test_build_dataloaders_reuses_the_disk_cache(
    tiny_raw, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tiny_raw["DATA_CONFIG"]["cache_dir"] = str(tmp_path / "cache")
    cfg = parse_config(tiny_raw)
    first = build_dataloaders(cfg)
    _forbid_decoding(monkeypatch)
    second = build_dataloaders(cfg)
    assert isinstance(second.train_dataset.images, np.memmap)
    np.testing.assert_array_equal(second.val_dataset.images, first.val_dataset.images)
    image, mask = second.val_dataset[0]
    assert image.shape == (3, 32, 32) and mask.shape == (1, 32, 32)
    images, masks = next(iter(second.train))  # augmentations read the read-only pages
    assert images.shape[1:] == (3, 32, 32) and masks.shape[1:] == (1, 32, 32)
    assert {e.split for e in list_cache(tmp_path / "cache")} == {"train", "val", "test"}


def test_persistent_cache_off_writes_nothing(tiny_raw, tmp_path: Path) -> None:
    tiny_raw["DATA_CONFIG"].update(cache_dir=str(tmp_path / "cache"), persistent_cache=False)
    loaders = build_dataloaders(parse_config(tiny_raw))
    assert loaders.train_dataset.cached and not isinstance(loaders.train_dataset.images, np.memmap)
    assert not (tmp_path / "cache").exists()


def test_key_follows_files_size_and_preprocessing(isic2017_tree: Path) -> None:
    samples = _train_samples(isic2017_tree)
    spec = Preprocessing(32)
    key = compute_cache_key(samples, spec)
    assert compute_cache_key(list(samples), Preprocessing(32)) == key
    others = {
        compute_cache_key(samples, Preprocessing(64)),
        compute_cache_key(samples, Preprocessing(32, "letterbox")),
        compute_cache_key(samples, Preprocessing(32, "letterbox", pad_value=9)),
        compute_cache_key(samples, Preprocessing(32, color_constancy="shades_of_gray")),
        compute_cache_key(samples, Preprocessing(32, reduced_decode=True)),
        compute_cache_key(samples[:-1], spec),
    }
    assert key not in others and len(others) == 6
    image = samples[0].image_path
    stat = image.stat()
    os.utime(image, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
    touched = compute_cache_key(samples, spec)
    assert touched != key
    image.write_bytes(image.read_bytes() + b"\0")  # same pixels, one byte longer
    os.utime(image, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
    assert compute_cache_key(samples, spec) not in (key, touched)


@pytest.mark.parametrize(
    "damage",
    ["truncate", "bad_manifest", "wrong_shape", "missing_masks", "not_utf8", "empty_images"],
)
def test_damaged_entry_is_rebuilt_with_a_warning(
    damage: str, isic2017_tree: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    samples = _train_samples(isic2017_tree)
    spec = Preprocessing(32)
    cache = tmp_path / "cache"
    good = load_or_build_split(samples, spec, cache, split="train")
    expected = np.array(good.images)
    del good
    entry = cache / compute_cache_key(samples, spec)
    if damage == "truncate":
        path = entry / IMAGES
        path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    elif damage == "bad_manifest":
        (entry / MANIFEST).write_text("{not json")
    elif damage == "wrong_shape":
        np.save(entry / MASKS, np.zeros((len(samples), 16, 16), np.uint8))
    elif damage == "not_utf8":
        (entry / MANIFEST).write_bytes(b'{"key": "\xff\xfe"}')
    elif damage == "empty_images":
        (entry / IMAGES).write_bytes(b"")
    else:
        (entry / MASKS).unlink()
    with caplog.at_level(logging.WARNING, logger="skinet.datasets.cache"):
        rebuilt = load_or_build_split(samples, spec, cache, split="train")
    assert "corrupt" in caplog.text and "rebuilding" in caplog.text
    np.testing.assert_array_equal(rebuilt.images, expected)
    assert json.loads((entry / MANIFEST).read_text())["count"] == len(samples)


def test_a_manifest_that_is_not_utf8_leaves_list_and_clear_working(
    isic2017_tree: Path, tmp_path: Path
) -> None:
    samples = _train_samples(isic2017_tree)
    cache = tmp_path / "cache"
    load_or_build_split(samples, Preprocessing(32), cache, split="train")
    entry = cache / compute_cache_key(samples, Preprocessing(32))
    (entry / MANIFEST).write_bytes(b"\xff\xfe\x00")
    (listed,) = list_cache(cache)
    assert listed.path == entry and not listed.complete
    assert skinet_main(["data", "cache", "--clear", "--cache-dir", str(cache)]) == 0
    assert not entry.exists()


def test_temporary_files_of_a_killed_build_are_removed_by_the_next_build(
    isic2017_tree: Path, tmp_path: Path
) -> None:
    samples = _train_samples(isic2017_tree)
    spec = Preprocessing(32)
    cache = tmp_path / "cache"
    entry = cache / compute_cache_key(samples, spec)
    entry.mkdir(parents=True)
    leftovers = [entry / ".images.npy.abc123.tmp", entry / ".masks.npy.def456.tmp"]
    for path in leftovers:
        path.write_bytes(b"\0" * 4096)  # what a kill during the first build leaves
    load_or_build_split(samples, spec, cache, split="train")
    assert not any(path.exists() for path in leftovers)
    assert sorted(p.name for p in entry.iterdir()) == [IMAGES, MANIFEST, MASKS]


def test_the_key_follows_the_opencv_version(
    isic2017_tree: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    samples = _train_samples(isic2017_tree)
    key = compute_cache_key(samples, Preprocessing(32))
    monkeypatch.setattr(cv2, "__version__", "0.0.0-another-libjpeg")
    assert compute_cache_key(samples, Preprocessing(32)) != key


def test_split_with_a_bad_file_is_reported_and_not_cached(
    isic2017_tree: Path, tmp_path: Path
) -> None:
    samples = _train_samples(isic2017_tree)
    samples[2].image_path.write_bytes(b"garbage")
    decoded = load_or_build_split(samples, Preprocessing(32), tmp_path / "cache", split="train")
    assert decoded.images is None
    assert [p.path for p in decoded.problems] == [samples[2].image_path]
    assert [e.complete for e in list_cache(tmp_path / "cache")] == [False]


def test_unusable_cache_folder_falls_back_to_ram_with_a_warning(
    isic2017_tree: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    samples = _train_samples(isic2017_tree)
    not_a_folder = tmp_path / "cache"
    not_a_folder.write_text("a file where the cache folder should be")
    with caplog.at_level(logging.WARNING, logger="skinet.datasets.cache"):
        decoded = load_or_build_split(samples, Preprocessing(32), not_a_folder, split="train")
    assert "unusable" in caplog.text and not isinstance(decoded.images, np.memmap)
    fresh = decode_split(samples, Preprocessing(32), keep=True, split="train")
    np.testing.assert_array_equal(decoded.images, fresh.images)


WRITER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from skinet.datasets import decoded as dataset
    from skinet.datasets.cache import load_or_build_split
    from skinet.datasets.registry import read_layout
    from skinet.imaging.preprocess import Preprocessing

    root, cache, barrier, name = (Path(a) for a in sys.argv[1:5])
    decoded = []
    real_load_pair = dataset.load_pair

    def counting_load_pair(*args, **kwargs):
        decoded.append(1)
        time.sleep(0.05)  # keep the build open long enough for the other writer to collide
        return real_load_pair(*args, **kwargs)

    dataset.load_pair = counting_load_pair
    (barrier / f"{name.name}.ready").touch()
    while not (barrier / "go").exists():
        time.sleep(0.005)
    samples = read_layout(root, "isic2017").splits["train"]
    result = load_or_build_split(samples, Preprocessing(32), cache, split="train")
    assert result.images is not None and not result.problems
    name.write_text(f"{len(decoded)} {int(result.images.sum())}")
    """
)


@pytest.mark.process
def test_two_processes_building_the_same_split_share_one_copy(
    isic2017_tree: Path, tmp_path: Path
) -> None:
    cache, barrier = tmp_path / "cache", tmp_path / "barrier"
    barrier.mkdir()
    env = {**os.environ, "PYTHONPATH": f"{SRC}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    outs = [tmp_path / f"writer{i}.txt" for i in range(2)]
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, str(isic2017_tree), str(cache), str(barrier), str(out)],
            env=env,
            stderr=subprocess.PIPE,
            text=True,
        )
        for out in outs
    ]
    deadline = time.monotonic() + 60
    while len(list(barrier.glob("*.ready"))) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    (barrier / "go").touch()
    for proc in procs:
        _, stderr = proc.communicate(timeout=120)
        assert proc.returncode == 0, stderr
    counts, sums = zip(*(map(int, out.read_text().split()) for out in outs), strict=True)
    assert sorted(counts) == [0, 6]  # one decoded the 6 pairs, the other waited and reused them
    assert sums[0] == sums[1]
    entries = list_cache(cache)
    assert len(entries) == 1 and entries[0].complete
    assert not list(entries[0].path.glob("*.tmp"))


def test_cache_list_and_clear_through_the_cli(
    isic2017_tree: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cache = tmp_path / "cache"
    samples = _train_samples(isic2017_tree)
    for size in (32, 48):
        load_or_build_split(samples, Preprocessing(size), cache, split="train", dataset="isic2017")
    assert skinet_main(["data", "cache", "--list", "--cache-dir", str(cache)]) == 0
    listed = capsys.readouterr().out
    assert "2 cached split(s)" in listed and listed.count("isic2017") == 2
    old = list_cache(cache)[-1]
    long_ago = time.time() - 3 * 86400
    os.utime(old.path / MANIFEST, (long_ago, long_ago))
    assert (
        skinet_main(["data", "cache", "--clear", "--older-than", "2", "--cache-dir", str(cache)])
        == 0
    )
    assert "removed 1 cached split(s)" in capsys.readouterr().out
    remaining = [e.key for e in list_cache(cache)]
    assert len(remaining) == 1 and old.key not in remaining
    os.environ["SKINET_CACHE_DIR"], saved = str(cache), os.environ.get("SKINET_CACHE_DIR", "")
    try:
        assert skinet_main(["data", "cache", "--clear"]) == 0
    finally:
        os.environ["SKINET_CACHE_DIR"] = saved
    assert list_cache(cache) == []
    assert skinet_main(["data", "cache", "--list", "--older-than", "1"]) == 2  # usage error


def _large_jpeg(path: Path, height: int = 300, width: int = 400) -> np.ndarray:
    rng = np.random.default_rng(0)
    image = cv2.GaussianBlur(rng.integers(0, 256, (height, width, 3), dtype=np.uint8), (0, 0), 3)
    assert cv2.imwrite(str(path), image, [cv2.IMWRITE_JPEG_QUALITY, 92])
    return image


def test_jpeg_size_and_reduction_factor(tmp_path: Path) -> None:
    _large_jpeg(tmp_path / "a.jpg")
    assert jpeg_size((tmp_path / "a.jpg").read_bytes()) == (300, 400)
    assert jpeg_size(b"\xff\xd8\xff\xe0\x00") is None
    assert jpeg_reduction(300, 400, Preprocessing(128)) == 2
    assert jpeg_reduction(300, 400, Preprocessing(64)) == 4
    assert jpeg_reduction(300, 400, Preprocessing(32)) == 8
    assert jpeg_reduction(300, 400, Preprocessing(200)) == 1
    assert jpeg_reduction(300, 400, Preprocessing(128, "letterbox")) == 2  # content 96 x 128


@pytest.mark.parametrize("mode", ["squash", "letterbox"])
def test_reduced_decode_is_close_to_full_decode_with_the_same_geometry(
    mode: str, tmp_path: Path
) -> None:
    _large_jpeg(tmp_path / "a.jpg", 301, 403)  # odd sides: libjpeg rounds the reduced size up
    mask = np.zeros((301, 403), np.uint8)
    cv2.circle(mask, (200, 150), 80, 255, -1)
    cv2.imwrite(str(tmp_path / "a.png"), mask)
    spec = Preprocessing(64, mode)  # type: ignore[arg-type]
    full = load_pair(tmp_path / "a.jpg", tmp_path / "a.png", spec)
    reduced = load_pair(tmp_path / "a.jpg", tmp_path / "a.png", replace(spec, reduced_decode=True))
    assert isinstance(full, tuple) and isinstance(reduced, tuple)
    np.testing.assert_array_equal(reduced[1], full[1])  # masks: same placement
    diff = np.abs(reduced[0].astype(int) - full[0].astype(int))
    assert diff.mean() < 2.0 and not np.array_equal(reduced[0], full[0])
