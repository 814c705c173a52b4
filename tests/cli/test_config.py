"""``skinet config show|check`` and ``-v`` anywhere on the command line."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from skinet.cli.main import build_parser, main
from skinet.config.experiment import parse_config


def _write(raw: dict[str, Any], path: Path) -> str:
    path.write_text(yaml.safe_dump(raw))
    return str(path)


def test_config_show_prints_every_default_and_derived_value(
    tiny_raw: dict[str, Any], tmp_path: Path, capsys
) -> None:
    config = _write(tiny_raw, tmp_path / "c.yaml")
    argv = ["config", "show", "--config", config, "--set", "TRAIN_CONFIG.max_epochs=7"]
    assert main(argv) == 0
    plain = yaml.safe_load(capsys.readouterr().out)
    assert "RESOLVED" not in plain  # resolving asks torch: only with --resolved
    assert main([*argv, "--resolved"]) == 0
    shown = yaml.safe_load(capsys.readouterr().out)
    assert {k: v for k, v in shown.items() if k != "RESOLVED"} == plain
    train = shown["TRAIN_CONFIG"]
    assert train["max_epochs"] == 7
    assert train["cosine_annealing_config"]["T_max"] == 7  # derived from max_epochs
    assert train["early_stopping_config"]["monitor"] == "val_best_dice_at_threshold"  # propagated
    assert train["precision"] is None  # automatic: resolved on the machine that runs it
    assert shown["RESOLVED"]["precision"] == "32-true"  # what it resolves to here (CPU)
    assert shown["TRANSFORM_CONFIG"]["train_transforms"]  # a default the file never gave
    assert set(shown) == {
        "TRAIN_CONFIG",
        "MODEL_CONFIG",
        "DATA_CONFIG",
        "TRANSFORM_CONFIG",
        "SWEEP_CONFIG",
        "RESOLVED",
    }
    resolved = shown.pop("RESOLVED")
    assert parse_config({**shown, "RESOLVED": resolved}).to_yaml_dict() == shown  # a valid config


def test_config_check_exits_zero_or_two(tiny_raw: dict[str, Any], tmp_path: Path, capsys) -> None:
    config = _write(tiny_raw, tmp_path / "c.yaml")
    assert main(["config", "check", "--config", config]) == 0
    assert "is a valid SkiNet config" in capsys.readouterr().out
    assert main(["config", "check", "--config", config, "--set", "TRAIN_CONFIG.lr=-1"]) == 2


def test_verbose_flag_after_the_subcommand() -> None:
    parser = build_parser()
    check = ["check", "--config", "c.yaml"]
    assert parser.parse_args(["config", *check, "-v"]).verbose is True
    assert parser.parse_args(["-v", "config", *check]).verbose is True
    assert parser.parse_args(["config", *check]).verbose is False
    assert parser.parse_args(["train", "-v", "--config", "c.yaml"]).verbose is True
    assert parser.parse_args(["data", "verify", "-v", "--data-dir", "d"]).verbose is True
