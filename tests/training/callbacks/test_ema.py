"""``TRAIN_CONFIG.use_ema``: the averaged weights are validated, saved, predicted with, resumed."""

from __future__ import annotations

from typing import Any

import torch

from skinet.config.experiment import parse_config
from skinet.inference.predictor import Predictor
from skinet.training.callbacks.ema import RAW_WEIGHTS_KEY
from skinet.training.run import run_training


def _ema_raw(tiny_raw: dict[str, Any], **train: Any) -> dict[str, Any]:
    tiny_raw["TRAIN_CONFIG"].update(
        use_ema=True,
        ema_config={"decay": 0.9},
        use_early_stopping=False,
        use_mlflow_logger=False,
        **train,
    )
    return tiny_raw


def _weights(path: Any) -> dict[str, Any]:
    return torch.load(path, map_location="cpu", weights_only=False)


def test_checkpoints_hold_the_average_and_predict_uses_it(tiny_raw: dict[str, Any]) -> None:
    result = run_training(parse_config(_ema_raw(tiny_raw, max_epochs=2)), visualize=False)
    assert result.best_checkpoint is not None
    checkpoint = _weights(result.best_checkpoint)
    average, raw = checkpoint["state_dict"], checkpoint[RAW_WEIGHTS_KEY]
    assert average.keys() == raw.keys()
    differ = [k for k in average if not torch.equal(average[k], raw[k])]
    assert differ, "the averaged weights equal the raw ones"

    predictor = Predictor.from_checkpoint(result.best_checkpoint, device="cpu")
    for name, value in predictor.model.state_dict().items():
        key = next(k for k in average if k.endswith(name))
        assert torch.equal(value.cpu(), average[key]), name


def test_a_resume_restores_the_average(tiny_raw: dict[str, Any]) -> None:
    whole = run_training(parse_config(_ema_raw(tiny_raw, max_epochs=2)), visualize=False)

    raw = _ema_raw(tiny_raw, max_epochs=1)
    raw["TRAIN_CONFIG"]["output_dir"] += "_resumed"
    first = run_training(parse_config(raw), visualize=False)
    raw["TRAIN_CONFIG"]["max_epochs"] = 2
    resumed = run_training(parse_config(raw), visualize=False, resume="last")
    assert resumed.run_dir == first.run_dir

    expected = _weights(whole.run_dir / "checkpoints" / "last.ckpt")
    got = _weights(resumed.run_dir / "checkpoints" / "last.ckpt")
    for key in (RAW_WEIGHTS_KEY, "state_dict"):
        for name, value in expected[key].items():
            torch.testing.assert_close(got[key][name], value, msg=f"{key} {name}")
