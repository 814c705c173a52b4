"""``benchmarks/bench_reduced_decode.py`` on a trained checkpoint and the synthetic JPEGs."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_reduced_decode.py"


def test_scores_full_and_reduced_decode_of_the_same_split(
    trained_checkpoint: Path, synthetic_root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = importlib.util.spec_from_file_location("bench_reduced_decode", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)

    # 64 px JPEGs at a 32 px input: the 2x reduced decode applies
    argv = ["--checkpoint", str(trained_checkpoint), "--data-dir", str(synthetic_root)]
    assert module.main(argv) == 0
    out = capsys.readouterr().out
    assert "val: 4 images at 32 px" in out, out
    full, reduced = (
        float(m) for m in re.findall(r"Jaccard, (?:full|reduced) decode: +([0-9.]+)", out)
    )
    assert 0.0 <= full <= 1.0 and 0.0 <= reduced <= 1.0
    pixels = float(re.search(r"mean absolute pixel difference: ([0-9.]+)", out).group(1))
    assert pixels > 0.0, out  # the two decodes really differ
    assert re.search(r"decode time: full [0-9.]+ s, reduced [0-9.]+ s \(ratio [0-9.]+\)", out)


def test_a_missing_checkpoint_is_a_usage_error(tmp_path: Path) -> None:
    spec = importlib.util.spec_from_file_location("bench_reduced_decode", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    with pytest.raises(SystemExit) as exit_info:
        module.main(["--checkpoint", str(tmp_path / "absent.ckpt")])
    assert exit_info.value.code == 2
