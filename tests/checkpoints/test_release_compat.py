"""Checkpoints across releases: the format pins the config schema, and the previous release's
checkpoint (``tests/fixtures/release_f0e677a``) still reads and predicts as it did."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict

from skinet.checkpoints.format import CHECKPOINT_KEY, CONFIG_SCHEMAS, FORMAT_VERSION
from skinet.checkpoints.read import load_checkpoint
from skinet.config.schema import config_schema_fingerprint
from skinet.inference.predictor import Predictor

RELEASE = Path(__file__).parents[1] / "fixtures" / "release_f0e677a"


def test_the_config_schema_is_the_one_the_current_format_pins() -> None:
    fingerprint = config_schema_fingerprint()
    assert fingerprint == CONFIG_SCHEMAS[FORMAT_VERSION], (
        f"the config schema changed (fingerprint {fingerprint}): an older SkiNet would refuse "
        "the new configs with an unknown-key error. Add a format version in "
        "skinet/checkpoints/format.py (FORMAT_VERSION, and CONFIG_SCHEMAS with this fingerprint) "
        "and describe it in the module docs and docs/models.md"
    )


def test_the_fingerprint_follows_what_a_reader_accepts_not_the_wording() -> None:
    class Section(BaseModel):
        model_config = ConfigDict(extra="forbid")
        mode: Literal["a", "b"] = "a"
        """A choice."""

    class Reworded(BaseModel):
        model_config = ConfigDict(extra="forbid")
        mode: Literal["a", "b"] = "b"
        """The same choice, described and defaulted otherwise."""

    class NewChoice(BaseModel):
        model_config = ConfigDict(extra="forbid")
        mode: Literal["a", "b", "c"] = "a"

    class NewField(Section):
        size: int | None = None

    def fingerprint(section: type[BaseModel]) -> str:
        class Config(BaseModel):
            SECTION: section  # type: ignore[valid-type]

        return config_schema_fingerprint(Config)

    assert fingerprint(Section) == fingerprint(Reworded)
    assert len({fingerprint(Section), fingerprint(NewChoice), fingerprint(NewField)}) == 3


def test_the_writer_writes_the_current_format(trained_checkpoint: Path) -> None:
    raw = torch.load(trained_checkpoint, map_location="cpu", weights_only=True)
    assert raw[CHECKPOINT_KEY]["format_version"] == FORMAT_VERSION
    assert FORMAT_VERSION in CONFIG_SCHEMAS


def test_a_checkpoint_of_the_previous_release_predicts_as_it_did() -> None:
    checkpoint = load_checkpoint(RELEASE / "model.ckpt")
    assert checkpoint.payload.format_version == 2
    expected = np.load(RELEASE / "expected.npz")
    predictor = Predictor.from_checkpoint(RELEASE / "model.ckpt", device="cpu")
    np.testing.assert_allclose(
        predictor.predict_proba(expected["image"]), expected["probs"], atol=1e-6
    )
    assert predictor.threshold == checkpoint.payload.threshold
