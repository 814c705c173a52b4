"""``skinet config show|check|init`` and ``-v`` anywhere on the command line."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from skinet.cli.main import build_parser, main
from skinet.config.experiment import parse_config

REPO = Path(__file__).resolve().parents[2]


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


def test_config_init_lists_and_writes_every_shipped_config(
    tmp_path: Path, monkeypatch, capsys
) -> None:
    """``skinet config init`` lists the files of configs/ and copies one out, byte for byte."""
    shipped = sorted(REPO.joinpath("configs").glob("*.yaml"))
    assert main(["config", "init"]) == 0
    listing = capsys.readouterr().out
    for path in shipped:
        assert path.stem in listing
    assert "Laptop recipe: ISIC 2017 at 128 px, 15 minutes of training on a CPU" in listing

    monkeypatch.chdir(tmp_path)
    for path in shipped:
        assert main(["config", "init", path.stem]) == 0
        assert (tmp_path / path.name).read_bytes() == path.read_bytes()
    out = capsys.readouterr().out
    assert "train it: skinet train --config cpu_budget.yaml" in out
    assert "train it: skinet train --config transforms_robust.yaml" not in out  # a snippet
    assert main(["config", "check", "--config", "cpu_budget.yaml"]) == 0

    (tmp_path / "runs").mkdir()
    assert main(["config", "init", "clinic.yaml", "--output", "runs/"]) == 0
    assert (tmp_path / "runs" / "clinic.yaml").is_file()
    assert main(["config", "init", "own_data", "--output", "mine.yaml"]) == 0
    assert yaml.safe_load((tmp_path / "mine.yaml").read_text())["DATA_CONFIG"]


def test_config_init_refuses_to_overwrite_and_names_what_exists(
    tmp_path: Path, monkeypatch, caplog
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "cpu_budget.yaml").write_text("# mine\n")
    assert main(["config", "init", "cpu_budget"]) == 2
    assert "cpu_budget.yaml already exists; give --force" in caplog.text
    assert (tmp_path / "cpu_budget.yaml").read_text() == "# mine\n"  # nothing lost
    assert main(["config", "init", "cpu_budget", "--force"]) == 0
    assert "TRAIN_CONFIG" in (tmp_path / "cpu_budget.yaml").read_text()
    assert main(["config", "init", "cpu-budget"]) == 2
    assert main(["config", "init", "../configs/cpu_budget"]) == 2  # only a shipped config's name
    assert "no shipped config named 'cpu-budget'; the shipped configs: clinic, cpu_budget" in (
        caplog.text
    )
    assert main(["config", "init", "quickstart", "--output", "configs/"]) == 0
    assert (tmp_path / "configs" / "quickstart.yaml").is_file()  # the folder is made


def test_a_missing_config_names_the_shipped_one_of_that_name(
    tmp_path: Path, monkeypatch, caplog
) -> None:
    """A pip user following the docs' ``--config configs/cpu_budget.yaml`` learns where it is,
    and the command it is given writes the file that the next try reads."""
    monkeypatch.chdir(tmp_path)
    assert main(["config", "check", "--config", "configs/cpu_budget.yaml"]) == 2
    hint = "`skinet config init cpu_budget --output configs/cpu_budget.yaml` writes SkiNet's there"
    assert hint in caplog.text
    assert main(["config", "init", "cpu_budget", "--output", "configs/cpu_budget.yaml"]) == 0
    assert main(["config", "check", "--config", "configs/cpu_budget.yaml"]) == 0
    caplog.clear()
    assert main(["config", "check", "--config", "main_config.yaml"]) == 2
    assert "`skinet config init main_config` writes SkiNet's main_config.yaml into the" in (
        caplog.text
    )
    assert main(["config", "check", "--config", "mine.yaml"]) == 2
    assert "the shipped configs: clinic, cpu_budget, debug_main_config" in caplog.text
