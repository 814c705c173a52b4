"""The persistent preprocessed cache: first vs second run data-ready time, and shared memory.

Usage::

    python benchmarks/bench_cache.py                 # 2000 images of 4288x2848 at 256 px
    python benchmarks/bench_cache.py --quick         # 50 images of 1072x712 (about a minute)
    python benchmarks/bench_cache.py --source-dir /data/ISIC2017/ISIC-2017_Training_Data

Writes full-resolution ISIC-like JPEGs (the given images, or SkiNet's synthetic ones, upscaled
with added skin texture and sensor noise so they do not compress unrealistically well) in the
ISIC 2017 layout, then times, each in a fresh process, how long the training split takes to be
ready (pairing + decode/resize into the cache on the first run, JPEGs at reduced scale as
DATA_CONFIG.reduced_jpeg_decode does unless ``--full-decode``; pairing + opening the memmaps
on the second). Then it starts one, and then two DDP-like processes at once that open the cache
and read every page, and reports their cache memory (PSS of the mapped cache files: a page
mapped by k processes counts 1/k in each) and their private memory gained (USS), against two
processes each holding its own in-RAM copy. Prints a table; asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import cv2
import numpy as np

REPO = Path(__file__).resolve().parents[1]

CHILD = """
import json, sys, time
from pathlib import Path
import numpy as np
import psutil
from skinet.datasets.cache import load_or_build_split
from skinet.datasets.decoded import decode_split
from skinet.datasets.registry import read_layout
from skinet.imaging.preprocess import Preprocessing

root, cache, size, mode, barrier, name, reduced = sys.argv[1:8]
reduced = reduced == "1"
me = psutil.Process()
before = me.memory_full_info()
started = time.perf_counter()
samples = read_layout(Path(root), "isic2017").splits["train"]
spec = Preprocessing(int(size), reduced_decode=reduced)
if mode == "ram":
    decoded = decode_split(samples, spec, keep=True, split="train")
else:
    decoded = load_or_build_split(samples, spec, Path(cache), split="train")
ready = time.perf_counter() - started
checksum = int(decoded.images.sum(dtype=np.uint64)) + int(decoded.masks.sum(dtype=np.uint64))
if barrier != "-":  # wait until every process holds its pages, then measure
    Path(barrier, name + ".ready").touch()
    while not Path(barrier, "measure").exists():
        time.sleep(0.01)
after = me.memory_full_info()
# The cache's pages: PSS of the mapped cache files (a page mapped by k processes counts 1/k in
# each), or the private memory gained for an in-RAM copy. Whole-process PSS would mix in the
# shared libraries, whose share moves as the other process loads them.
mapped = [m for m in me.memory_maps() if m.path.endswith(("images.npy", "masks.npy"))]
pss = sum(m.pss for m in mapped) if mode != "ram" else after.uss - before.uss
print(json.dumps({
    "ready_s": ready,
    "checksum": checksum,
    "pss_mb": pss / 2**20,
    "uss_mb": (after.uss - before.uss) / 2**20,
    "cache_mb": (decoded.images.nbytes + decoded.masks.nbytes) / 2**20,
}))
"""


def make_isic_like(
    root: Path, count: int, height: int, width: int, source_dir: Path | None
) -> None:
    """``count`` full-resolution JPEG/PNG pairs in the ISIC 2017 training folders of ``root``."""
    from concurrent.futures import ThreadPoolExecutor

    from skinet.datasets.layouts import ISIC2017_FOLDERS
    from skinet.datasets.synthetic import make_synthetic_sample

    image_dir, mask_dir = (root / name for name in ISIC2017_FOLDERS["train"])
    for folder in (image_dir, mask_dir, *(root / n for n in ISIC2017_FOLDERS["val"])):
        folder.mkdir(parents=True, exist_ok=True)
    sources = sorted(source_dir.glob("*.jpg")) if source_dir else []
    # Sensor grain: one noise field drawn once, each image takes a window at its own offset
    # (drawing 3 x 12 M normals per image would dominate the generation time).
    margin = 64
    grain = np.random.default_rng(0).normal(0, 4, (height + margin, width + margin, 3))
    grain = np.clip(grain, -127, 127).astype(np.int16)

    def write(i: int) -> None:
        rng = np.random.default_rng([1, i])
        if sources:
            small = cv2.imread(str(sources[i % len(sources)]))
            mask_small = np.full(small.shape[:2], 255, np.uint8)  # masks only need the size
            cv2.circle(mask_small, (small.shape[1] // 2, small.shape[0] // 2), 9, 0, -1)
        else:
            small, mask_small = make_synthetic_sample(np.random.default_rng([0, i]), 512)
        image = cv2.resize(small, (width, height), interpolation=cv2.INTER_CUBIC)
        texture = cv2.resize(
            rng.normal(0, 6, (height // 8, width // 8)).astype(np.float32),
            (width, height),
            interpolation=cv2.INTER_CUBIC,
        ).astype(np.int16)
        dy, dx = (int(v) for v in rng.integers(0, margin, 2))
        noisy = image.astype(np.int16) + texture[..., None]
        noisy += grain[dy : dy + height, dx : dx + width]
        image = np.clip(noisy, 0, 255).astype(np.uint8)
        mask = cv2.resize(mask_small, (width, height), interpolation=cv2.INTER_NEAREST)
        stem = f"ISIC_{i:07d}"
        cv2.imwrite(str(image_dir / f"{stem}.jpg"), image, [cv2.IMWRITE_JPEG_QUALITY, 92])
        cv2.imwrite(str(mask_dir / f"{stem}_segmentation.png"), mask)

    # OpenCV and numpy release the GIL in the heavy parts: threads use every core.
    with ThreadPoolExecutor(os.cpu_count() or 2) as pool:
        list(pool.map(write, range(count)))


def run_children(
    root: Path, cache: Path, size: int, mode: str, count: int, tmp: Path, reduced: bool
) -> list[dict[str, float]]:
    """``count`` processes at once; each reports its data-ready time and memory."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO / "src"), os.environ.get("PYTHONPATH", "")]),
    }
    barrier = Path(tempfile.mkdtemp(dir=tmp)) if count > 1 else None
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-c",
                CHILD,
                str(root),
                str(cache),
                str(size),
                mode,
                str(barrier or "-"),
                f"p{i}",
                "1" if reduced else "0",
            ],
            env=env,
            stdout=subprocess.PIPE,
            text=True,
        )
        for i in range(count)
    ]
    if barrier is not None:
        while len(list(barrier.glob("*.ready"))) < count:
            if any(p.poll() not in (None, 0) for p in procs):
                break
            time.sleep(0.02)
        time.sleep(0.5)
        (barrier / "measure").touch()
    results = []
    for proc in procs:
        out, _ = proc.communicate()
        if proc.returncode != 0:
            raise SystemExit(f"child failed with exit code {proc.returncode}")
        results.append(json.loads(out.strip().splitlines()[-1]))
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--num-images", type=int, help="default 2000 (--quick: 50)")
    parser.add_argument("--height", type=int, help="default 2848 (--quick: 712)")
    parser.add_argument("--width", type=int, help="default 4288 (--quick: 1072)")
    parser.add_argument("--image-size", type=int, default=256)
    parser.add_argument("--source-dir", type=Path, help="JPEGs to upscale (default: synthetic)")
    parser.add_argument("--quick", action="store_true", help="50 images of 1072x712 by default")
    parser.add_argument("--workdir", type=Path, help="keep the images here (default: temp)")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument(
        "--full-decode",
        action="store_true",
        help="decode JPEGs in full (default: reduced scale, as DATA_CONFIG.reduced_jpeg_decode)",
    )
    args = parser.parse_args()
    defaults = (50, 712, 1072) if args.quick else (2000, 2848, 4288)
    for name, default in zip(("num_images", "height", "width"), defaults, strict=True):
        if getattr(args, name) is None:
            setattr(args, name, default)

    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        root = (args.workdir or tmp) / "isic_like"
        if not (root / "ISIC-2017_Training_Data").is_dir():
            started = time.perf_counter()
            make_isic_like(root, args.num_images, args.height, args.width, args.source_dir)
            print(
                f"wrote {args.num_images} pairs of {args.width}x{args.height} in "
                f"{time.perf_counter() - started:.1f} s"
            )
        cache = tmp / "cache"
        reduced = not args.full_decode

        def run(mode: str, count: int) -> list[dict[str, float]]:
            return run_children(root, cache, args.image_size, mode, count, tmp, reduced)

        first, second, one = (run("cache", 1)[0] for _ in range(3))
        two = run("cache", 2)
        ram_two = run("ram", 2)

    figures = {
        "images": args.num_images,
        "source": f"{args.width}x{args.height}",
        "image_size": args.image_size,
        "jpeg_decode": "reduced" if reduced else "full",
        "cache_mb": first["cache_mb"],
        "first_ready_s": first["ready_s"],
        "second_ready_s": second["ready_s"],
        "first_over_second": first["ready_s"] / second["ready_s"],
        "one_process_pss_mb": one["pss_mb"],
        "two_processes_pss_mb": sum(r["pss_mb"] for r in two),
        "two_over_one_pss": sum(r["pss_mb"] for r in two) / max(one["pss_mb"], 1e-9),
        "two_processes_uss_mb": sum(r["uss_mb"] for r in two),
        "two_in_ram_copies_mb": sum(r["pss_mb"] for r in ram_two),
        "same_pixels": len({first["checksum"], second["checksum"], *(r["checksum"] for r in two)})
        == 1,
    }
    print(
        f"{args.num_images} images {args.width}x{args.height} -> {args.image_size} px "
        f"({figures['jpeg_decode']} JPEG decode; cache {figures['cache_mb']:.1f} MB)"
    )
    print(f"{'data ready, first run (decode + write)':<44} {first['ready_s']:>9.2f} s")
    print(f"{'data ready, second run (open memmaps)':<44} {second['ready_s']:>9.3f} s")
    print(f"{'first / second':<44} {figures['first_over_second']:>9.1f} x")
    print(f"{'cache PSS, one process':<44} {one['pss_mb']:>9.1f} MB")
    print(f"{'cache PSS, two processes together':<44} {figures['two_processes_pss_mb']:>9.1f} MB")
    print(f"{'two / one':<44} {figures['two_over_one_pss']:>9.2f} x")
    print(
        f"{'USS (private), two processes together':<44} {figures['two_processes_uss_mb']:>9.1f} MB"
    )
    print(
        f"{'two processes with own in-RAM copies':<44} {figures['two_in_ram_copies_mb']:>9.1f} MB"
    )
    print(f"same pixels in every run: {figures['same_pixels']}")
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
