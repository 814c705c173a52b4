"""``benchmarks/bench_cache.py --quick`` end to end (fewer, smaller images to stay fast)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.heavy
def test_bench_cache_quick_reports_a_shared_second_run(tmp_path: Path) -> None:
    out = tmp_path / "figures.json"
    argv = ["--quick", "--num-images", "6", "--height", "300", "--width", "400", "--json", str(out)]
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    proc = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "bench_cache.py"), *argv],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    figures = json.loads(out.read_text())
    assert figures["images"] == 6 and figures["same_pixels"] is True
    assert figures["jpeg_decode"] == "reduced"  # as DATA_CONFIG.reduced_jpeg_decode
    assert figures["cache_mb"] > 0 and figures["first_ready_s"] > 0
    assert "first / second" in proc.stdout and "two / one" in proc.stdout
