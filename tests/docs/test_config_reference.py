"""The generated field tables of docs/configuration.md match the pydantic config models."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

DOCS = Path(__file__).resolve().parents[2] / "docs"


@pytest.fixture(scope="module")
def generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "gen_config_reference", DOCS / "gen_config_reference.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_configuration_page_is_up_to_date(generator: ModuleType) -> None:
    page = (DOCS / "configuration.md").read_text(encoding="utf-8")
    assert generator.update_text(page) == page, (
        "docs/configuration.md is out of date with src/skinet/config: "
        "run `python docs/gen_config_reference.py`"
    )


def test_every_field_of_every_section_is_listed(generator: ModuleType) -> None:
    from skinet.config.experiment import ExperimentConfig

    block = generator.render_reference()
    for field in ExperimentConfig.model_fields.values():
        section = field.annotation
        assert f"### `{field.alias}`" in block
        for name in section.model_fields:
            assert f"| `{name}` |" in block, f"{field.alias}.{name} missing"


def test_field_docstrings_are_read_from_the_source(generator: ModuleType) -> None:
    from skinet.config.train import TrainConfig

    docs = generator.attribute_docstrings(TrainConfig)
    assert set(docs) == set(TrainConfig.model_fields), "a TrainConfig field has no docstring"
    assert docs["batch_size"] == "Samples per training batch."


def test_outdated_page_is_detected(generator: ModuleType, tmp_path: Path) -> None:
    page = tmp_path / "configuration.md"
    page.write_text(f"# Page\n\n{generator.BEGIN}\n| stale |\n{generator.END}\n", encoding="utf-8")
    assert generator.main(["--check", "--page", str(page)]) == 1
    assert generator.main(["--page", str(page)]) == 0
    assert generator.main(["--check", "--page", str(page)]) == 0
    assert "| `batch_size` |" in page.read_text(encoding="utf-8")
