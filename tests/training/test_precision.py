"""``TRAIN_CONFIG.precision: bf16-mixed`` on the CPU, and the warning where it is emulated.

A CPU without bfloat16 instructions is simulated by replacing torch's two CPU probes
(``torch.cpu._is_avx512_bf16_supported``, ``_is_amx_tile_supported``): everything downstream of
them is the real code.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml

from skinet.checkpoints.format import CHECKPOINT_KEY
from skinet.cli.main import main
from skinet.config.experiment import parse_config
from skinet.runtime.devices import precision_hint, resolve_train_settings


def _cpu_bf16(monkeypatch: pytest.MonkeyPatch, native: bool) -> None:
    for probe in ("_is_avx512_bf16_supported", "_is_amx_tile_supported"):
        monkeypatch.setattr(torch.cpu, probe, lambda: native, raising=False)


def _hint(native: bool | None, **train: object) -> str | None:
    settings = resolve_train_settings(parse_config({"TRAIN_CONFIG": train}).train)
    return precision_hint(settings, native_bf16=native)


def test_only_bfloat16_on_a_cpu_that_emulates_it_is_warned_about() -> None:
    assert _hint(False, accelerator="cpu") is None  # 32-true
    assert _hint(True, accelerator="cpu", precision="bf16-mixed") is None
    assert _hint(False, accelerator="gpu", precision="bf16-mixed") is None
    # Lightning runs 16-mixed as bf16-mixed on a CPU.
    for precision in ("bf16-mixed", "16-mixed"):
        hint = _hint(False, accelerator="cpu", precision=precision)
        assert hint is not None
        assert f"TRAIN_CONFIG.precision: {precision}" in hint
        assert "--set TRAIN_CONFIG.precision=32-true" in hint


def test_the_probe_asks_this_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    _cpu_bf16(monkeypatch, native=False)
    assert _hint(None, accelerator="cpu", precision="bf16-mixed") is not None
    _cpu_bf16(monkeypatch, native=True)
    assert _hint(None, accelerator="cpu", precision="bf16-mixed") is None


def test_bf16_mixed_trains_on_the_cpu_keeps_float32_weights_and_warns_where_emulated(
    tiny_raw: dict[str, Any],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    _cpu_bf16(monkeypatch, native=False)
    tiny_raw["TRAIN_CONFIG"].update(precision="bf16-mixed", max_epochs=1, use_mlflow_logger=False)
    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump(tiny_raw))
    with caplog.at_level(logging.WARNING, logger="skinet.training.run"):
        assert main(["train", "--config", str(config), "--no-visualize"]) == 0
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("torch emulates bfloat16 here" in message for message in warnings), warnings

    (run,) = (p for p in (tmp_path / "runs").iterdir() if p.is_dir())
    assert yaml.safe_load((run / "config.yaml").read_text())["RESOLVED"]["precision"] == (
        "bf16-mixed"
    )
    summary = json.loads((run / "metrics.json").read_text())
    assert 0.0 <= summary["metrics"]["test_dice"] <= 1.0
    # Mixed precision computes in bfloat16 and keeps the weights (and the checkpoint) in float32.
    payload = torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)
    dtypes = {t.dtype for t in payload["state_dict"].values() if t.is_floating_point()}
    assert dtypes == {torch.float32}
    assert payload[CHECKPOINT_KEY]["resolved"]["precision"] == "bf16-mixed"


@pytest.mark.parametrize(("native", "says"), [(True, "native"), (False, "emulated")])
def test_skinet_info_says_whether_this_cpu_has_bfloat16(
    native: bool, says: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _cpu_bf16(monkeypatch, native)
    assert main(["info"]) == 0
    (line,) = (line for line in capsys.readouterr().out.splitlines() if "CPU bfloat16:" in line)
    assert line.split(": ", 1)[1].startswith(says), line
