"""Safe checkpoint loading: real checkpoints load with weights_only=True, pickles are refused."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from skinet.checkpoints.format import CheckpointError
from skinet.checkpoints.read import load_checkpoint
from skinet.inference.predictor import Predictor


class _Exploit:
    """Unpickling this would run a shell command that creates ``marker``."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple:
        return (os.system, (f"touch {self.marker}",))


def test_real_checkpoint_loads_with_weights_only(trained_checkpoint: Path) -> None:
    raw = torch.load(trained_checkpoint, map_location="cpu", weights_only=True)
    assert all(key.startswith("model.") for key in raw["state_dict"])
    checkpoint = load_checkpoint(trained_checkpoint)
    assert checkpoint.config.data.image_size == 32
    assert checkpoint.val_optimal_threshold is not None
    assert checkpoint.threshold == pytest.approx(checkpoint.val_optimal_threshold)
    assert not any(key.startswith("model.") for key in checkpoint.state_dict)


def test_malicious_pickle_is_refused_without_running(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    path = tmp_path / "evil.ckpt"
    torch.save({"state_dict": {}, "skinet": {"config": {}, "payload": _Exploit(marker)}}, path)
    with pytest.raises(CheckpointError, match="refusing to load .*not plain weights"):
        Predictor.from_checkpoint(path, device="cpu")
    assert not marker.exists()


def test_compiled_checkpoint_keys_load(trained_checkpoint: Path, tmp_path: Path) -> None:
    raw = torch.load(trained_checkpoint, map_location="cpu", weights_only=True)
    raw["state_dict"] = {
        "model._orig_mod." + key.removeprefix("model."): value
        for key, value in raw["state_dict"].items()
    }
    path = tmp_path / "compiled.ckpt"
    torch.save(raw, path)
    compiled = load_checkpoint(path)
    plain = load_checkpoint(trained_checkpoint)
    assert compiled.state_dict.keys() == plain.state_dict.keys()


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ({"state_dict": {}}, "not a SkiNet checkpoint"),
        ({"skinet": {"config": {"MODEL_CONFIG": {"kernel": "x"}}}}, "MODEL_CONFIG.kernel"),
        ({"skinet": {"config": {}}, "state_dict": {"other.w": torch.zeros(1)}}, "no model weights"),
    ],
)
def test_bad_checkpoints_have_clear_errors(tmp_path: Path, content: dict, message: str) -> None:
    path = tmp_path / "bad.ckpt"
    torch.save(content, path)
    with pytest.raises(CheckpointError, match=message):
        load_checkpoint(path)


def test_corrupt_and_missing_files(tmp_path: Path) -> None:
    corrupt = tmp_path / "corrupt.ckpt"
    corrupt.write_bytes(b"not a checkpoint")
    with pytest.raises(
        CheckpointError, match="is not a checkpoint: it is not a torch.save archive"
    ):
        load_checkpoint(corrupt)
    with pytest.raises(FileNotFoundError):
        load_checkpoint(tmp_path / "missing.ckpt")


def test_a_truncated_checkpoint_is_called_truncated(
    trained_checkpoint: Path, tmp_path: Path
) -> None:
    from tests.helpers.inference import run_cli, write_rgb

    write_rgb(tmp_path / "image.png", 32, 32)
    truncated = tmp_path / "best-epoch=000.ckpt"
    data = trained_checkpoint.read_bytes()
    truncated.write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match="is truncated or damaged") as error:
        load_checkpoint(truncated)
    assert "not a torch.save archive" not in str(error.value)
    argv = ["predict", "--checkpoint", str(truncated), "--images", str(tmp_path / "image.png")]
    assert run_cli([*argv, "--output", str(tmp_path / "out")]) == 1


def test_transforms_a_checkpoint_holds_are_not_rebuilt_to_predict(
    trained_checkpoint: Path, tmp_path: Path
) -> None:
    """A transform albumentations does not know does not stop prediction; training refuses it."""
    from tests.helpers.inference import rewrite_checkpoint

    from skinet.augment.checks import check_config
    from skinet.config.errors import ConfigError
    from skinet.config.experiment import parse_config

    config = torch.load(trained_checkpoint, map_location="cpu", weights_only=True)["skinet"]
    config = dict(config["config"])
    config["TRANSFORM_CONFIG"] = {"train_transforms": [{"name": "NoSuchTransform"}]}
    target = rewrite_checkpoint(trained_checkpoint, tmp_path / "old.ckpt", config=config)

    loaded = load_checkpoint(target)
    assert loaded.config.transform.train_transforms[0].name == "NoSuchTransform"
    Predictor.from_checkpoint(target, device="cpu")
    with pytest.raises(ConfigError, match=r"unknown albumentations transform 'NoSuchTransform'"):
        check_config(parse_config(config))


def test_the_hint_for_a_truncated_checkpoint_lists_only_the_readable_ones_beside_it(
    trained_checkpoint: Path, tmp_path: Path
) -> None:
    from skinet.training.resume import ResumeError, check_resume

    data = trained_checkpoint.read_bytes()
    (tmp_path / "last.ckpt").write_bytes(data)
    for name in ("best-epoch=000.ckpt", "best-epoch=001.ckpt"):
        (tmp_path / name).write_bytes(data[: len(data) // 2])
    (tmp_path / "empty.ckpt").write_bytes(b"")
    with pytest.raises(ResumeError, match="is truncated or damaged") as error:
        check_resume(tmp_path / "best-epoch=000.ckpt", 5, tmp_path)
    message = str(error.value)
    assert "Checkpoints beside it: last.ckpt." in message
    assert message.endswith("Unreadable beside it too: best-epoch=001.ckpt, empty.ckpt.")
