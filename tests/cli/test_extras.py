"""The pip extras: what each installs matches what SkiNet checks, and the message names it."""

from __future__ import annotations

import re
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

import pytest

from skinet.cli.extras import (
    EXTRAS,
    MissingExtraError,
    as_missing_extra,
    check_requirements,
    requires,
)

PYPROJECT = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())
PROJECT = PYPROJECT["project"]


def _distribution(requirement: str) -> str:
    return re.split(r"[<>=!~\[ ;]", requirement, maxsplit=1)[0].lower()


def test_each_extra_installs_the_modules_skinet_looks_for() -> None:
    providers = packages_distributions()
    for extra, modules in EXTRAS.items():
        declared = {_distribution(r) for r in PROJECT["optional-dependencies"][extra]}
        provided = {m: {d.lower() for d in providers.get(m, [])} for m in modules}
        assert all(provided.values()), f"not installed here: {provided}"
        # Every module comes from a declared distribution, and every distribution gives one.
        assert all(names & declared for names in provided.values()), (extra, provided)
        assert declared <= set().union(*provided.values()), (extra, declared)


def test_core_dependencies_leave_training_out_and_dev_installs_everything() -> None:
    core = {_distribution(r) for r in PROJECT["dependencies"]}
    training = {_distribution(r) for r in PROJECT["optional-dependencies"]["train"]}
    assert not core & training
    assert {"torch", "numpy", "opencv-python-headless", "pydantic", "pyyaml", "rich"} <= core
    assert {"matplotlib", "scipy"} <= core
    assert "skinet[train,onnx]" in PROJECT["optional-dependencies"]["dev"]


def test_missing_module_of_an_extra_names_the_install_command() -> None:
    error = as_missing_extra(ModuleNotFoundError("x", name="mlflow.tracking"), "skinet train")
    assert isinstance(error, MissingExtraError)
    assert str(error) == (
        "skinet train needs the training extra: pip install 'skinet[train]' (missing: mlflow)"
    )
    assert as_missing_extra(ModuleNotFoundError("x", name="not_an_extra"), "skinet x") is None


def test_requirements_are_checked_against_what_is_installed() -> None:
    @requires("onnx", "lightning")
    def handler(args: object) -> int:
        return 0

    check_requirements(handler, "skinet export")  # both installed by the dev extra
    with pytest.raises(ValueError, match="belong to no extra"):
        requires("numpy")
