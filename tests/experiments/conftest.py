"""Fixtures of the experiment tests: a one-epoch tiny config and a fake trainer."""

from __future__ import annotations

import pytest
from tests.helpers.sweep_fakes import FakeTrainer


@pytest.fixture
def fake_trainer() -> FakeTrainer:
    return FakeTrainer()


@pytest.fixture(autouse=True)
def _no_inherited_tracking_uri(monkeypatch: pytest.MonkeyPatch) -> None:
    """MLflow exports the last tracking URI it used; each test uses its own store."""
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
