"""TRANSFORM_CONFIG validation, the shipped YAML and seeding."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from skinet.augment.checks import check_config
from skinet.augment.cpu import build_train_transform, resolve_transform_seed
from skinet.config.errors import ConfigError
from skinet.config.experiment import parse_config
from skinet.config.transform import TransformConfig

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("specs", "expected"),
    [
        ([{"name": "NoSuchFlip"}], "train_transforms[0] (NoSuchFlip): unknown albumentations"),
        (
            [{"name": "HorizontalFlip"}, {"name": "VerticalFlip", "params": {"prob": 0.5}}],
            "train_transforms[1] (VerticalFlip): argument(s) 'prob' are not valid",
        ),
        ([{"name": "Affine", "params": {"scale": "big"}}], "train_transforms[0] (Affine): invalid"),
        ([{"name": "HorizontalFlip", "params": {"p": 3}}], "train_transforms[0] (HorizontalFlip)"),
        ([{"name": "Compose"}], "unknown albumentations transform 'Compose'"),
    ],
)
def test_bad_transforms_fail_at_load_time(specs, expected) -> None:
    with pytest.raises(ConfigError) as info:
        check_config(parse_config({"TRANSFORM_CONFIG": {"train_transforms": specs}}))
    assert "TRANSFORM_CONFIG.train_transforms" in str(info.value)
    assert expected in str(info.value)


def test_unknown_compose_kwarg() -> None:
    with pytest.raises(ConfigError, match="TRANSFORM_CONFIG.compose_kwargs: unknown"):
        check_config(parse_config({"TRANSFORM_CONFIG": {"compose_kwargs": {"sed": 1}}}))


def test_shipped_yaml_is_the_schema_default() -> None:
    raw = yaml.safe_load((REPO / "configs" / "transforms_dermoscopy.yaml").read_text())
    from_yaml = parse_config(raw).transform
    assert from_yaml == TransformConfig()


@pytest.mark.parametrize(
    ("seed_value", "compose_kwargs", "expected"),
    [(None, {}, 42), (7, {"seed": 9}, 7), (None, {"seed": 9}, 9)],
)
def test_seed_fallback(seed_value, compose_kwargs, expected) -> None:
    cfg = parse_config(
        {"TRANSFORM_CONFIG": {"seed_value": seed_value, "compose_kwargs": compose_kwargs}}
    )
    assert resolve_transform_seed(cfg.transform, cfg.train.seed) == expected
    assert build_train_transform(cfg).seed == expected


def test_every_entry_point_that_trains_checks_the_transforms(
    tiny_raw: dict, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from skinet.cli.main import main
    from skinet.training.run import run_training

    tiny_raw["TRANSFORM_CONFIG"] = {"train_transforms": [{"name": "NoSuchFlip"}]}
    config = tmp_path / "bad.yaml"
    config.write_text(yaml.safe_dump(tiny_raw))
    for command in (["train"], ["sweep"], ["seeds", "--seeds", "1"], ["cv"]):
        caplog.clear()
        assert main([*command, "--config", str(config)]) == 2, command
        assert "train_transforms[0] (NoSuchFlip): unknown albumentations" in caplog.text, command
    with pytest.raises(ConfigError, match=r"NoSuchFlip\): unknown albumentations"):
        run_training(parse_config(tiny_raw))
    assert not (tmp_path / "runs").exists()
