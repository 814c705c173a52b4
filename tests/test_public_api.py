"""The public Python API: every name the guides use imports from its package, each package's
``__all__`` resolves lazily to the defining submodule's object, and importing a package alone
stays light (no torch), as the command line relies on."""

from __future__ import annotations

import ast
import importlib
import importlib.util
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SRC = REPO / "src" / "skinet"

GUIDE_NAMES = {
    "skinet.config": [
        "load_config",
        "ExperimentConfig",
        "TrainConfig",
        "EarlyStoppingConfig",
        "CheckpointConfig",
        "MLflowConfig",
        "LitLoggerConfig",
        "UNet2DModelConfig",
        "SweepConfig",
    ],
    "skinet.keys": ["MetricsKey", "HyperparamKey"],
    "skinet.models": ["UNet2D"],
    "skinet.metrics": ["find_best_threshold"],
    "skinet.training": [
        "LightningModel",
        "train_and_evaluate",
        "configure_reproducibility",
        "setup_logging_and_callbacks",
        "SystemMetricsThreadCallback",
        "ThroughputCallback",
        "MLflowTrainingArtifactsCallback",
        "RepeatDataLoader",
        "visualize_augmented_data",
    ],
    "skinet.training.callbacks": [
        "setup_logging_and_callbacks",
        "SystemMetricsThreadCallback",
        "ThroughputCallback",
        "MLflowTrainingArtifactsCallback",
    ],
    "skinet.training.data": ["RepeatDataLoader", "visualize_augmented_data"],
    "skinet.experiments": ["validate_search_space", "build_objective", "scale_lr"],
    "skinet.inference": ["Predictor"],
    "skinet.evaluation": ["evaluate_predictor"],
}
"""The classes and functions the training and debugging guides name, plus the objects a script
starts from (``load_config``, ``UNet2D``, ``Predictor``, ``evaluate_predictor``), by the package a
reader imports them from."""

PACKAGES = sorted(
    ".".join(("skinet", *path.parent.relative_to(SRC).parts))
    for path in SRC.rglob("__init__.py")
    if path.parent != SRC and "cli" not in path.parent.relative_to(SRC).parts
)
"""Every package with a public face (the command line is used as a program, not imported)."""

HEAVY = ("torch", "cv2", "matplotlib", "scipy", "lightning", "mlflow", "optuna", "albumentations")


def lazy_names(package: str) -> dict[str, str]:
    """Name -> defining module, as the package's ``if TYPE_CHECKING:`` imports declare them."""
    path = SRC.joinpath(*package.split(".")[1:], "__init__.py")
    names: dict[str, str] = {}
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
            for imported in node.body:
                assert isinstance(imported, ast.ImportFrom) and imported.module is not None
                names.update({alias.name: imported.module for alias in imported.names})
    return names


def public_names(package: str) -> list[str]:
    return list(importlib.import_module(package).__all__)


@pytest.mark.parametrize(
    ("package", "name"), [(p, n) for p, names in GUIDE_NAMES.items() for n in names]
)
def test_guide_name_imports_from_its_package(package: str, name: str) -> None:
    namespace: dict[str, object] = {}
    exec(f"from {package} import {name}", namespace)
    obj = namespace[name]
    home = sys.modules[obj.__module__]  # type: ignore[attr-defined]
    assert obj.__module__.startswith(package)  # type: ignore[attr-defined]
    assert getattr(home, name) is obj


def test_every_package_has_a_public_face() -> None:
    assert PACKAGES and all(public_names(p) for p in PACKAGES)
    assert set(GUIDE_NAMES) - {"skinet.keys"} <= set(PACKAGES)


@pytest.mark.parametrize("package", PACKAGES)
def test_all_lists_exactly_the_lazy_names_and_each_resolves(package: str) -> None:
    module = importlib.import_module(package)
    declared = lazy_names(package)
    assert len(module.__all__) == len(set(module.__all__)), "a name twice in __all__"
    assert sorted(module.__all__) == sorted(declared)
    for name, home in declared.items():
        assert home.startswith(f"{package}.")
        assert getattr(module, name) is getattr(importlib.import_module(home), name)
        assert name in dir(module)
    with pytest.raises(AttributeError, match="has no attribute 'not_a_name'"):
        module.not_a_name  # noqa: B018


def test_api_page_lists_each_package_all() -> None:
    """The "Importing" table of docs/api.md is each package's ``__all__``."""
    text = (REPO / "docs" / "api.md").read_text()
    rows = re.findall(r"^\| `(skinet[\w.]*)` \| (.+) \|$", text, re.MULTILINE)
    listed = {package: re.findall(r"`(\w+)`", names) for package, names in rows}
    assert listed == {p: public_names(p) for p in PACKAGES}


def test_api_page_example_runs(
    trained_checkpoint: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The "Importing" example of docs/api.md, run as written beside a real checkpoint."""
    text = (REPO / "docs" / "api.md").read_text()
    example = re.search(r"## Importing\n.*?```python\n(.*?)```", text, re.DOTALL)
    assert example is not None
    shutil.copy(trained_checkpoint, tmp_path / "best.ckpt")
    (tmp_path / "configs").symlink_to(REPO / "configs")
    monkeypatch.chdir(tmp_path)
    exec(compile(example.group(1), "docs/api.md", "exec"), {})
    assert (tmp_path / "evaluation" / "summary.json").is_file()


def test_code_inside_skinet_imports_from_the_defining_module() -> None:
    """Re-exports are for users: inside SkiNet an import names the module that defines the
    object, so the import graph (and import-linter's layers) stays the real one."""
    packages = set(PACKAGES)
    offenders = []
    for path in SRC.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module in packages:
                for alias in node.names:
                    if importlib.util.find_spec(f"{node.module}.{alias.name}") is None:
                        offenders.append(f"{path.relative_to(SRC)}: {node.module}.{alias.name}")
    assert not offenders


def run_python(code: str) -> dict[str, list[str]]:
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO
    )
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.mark.process
def test_importing_a_package_alone_loads_no_heavy_library() -> None:
    code = f"""
import importlib, json, sys
loaded = {{}}
for package in {PACKAGES!r}:
    importlib.import_module(package)
    loaded[package] = [m for m in {HEAVY!r} if m in sys.modules]
print(json.dumps(loaded))
"""
    assert run_python(code) == {p: [] for p in PACKAGES}


@pytest.mark.process
def test_load_config_from_the_config_package_loads_no_torch() -> None:
    code = f"""
import json, sys
import skinet.config
from skinet.config import load_config
cfg = load_config("configs/main_config.yaml")
print(json.dumps({{"loaded": [m for m in {HEAVY!r} if m in sys.modules]}}))
"""
    assert run_python(code) == {"loaded": []}


@pytest.mark.process
def test_importing_skinet_evaluation_alone_loads_no_torch() -> None:
    code = """
import json, sys
import skinet.evaluation
print(json.dumps({"torch": "torch" in sys.modules, "pydantic": "pydantic" in sys.modules}))
"""
    assert run_python(code) == {"torch": False, "pydantic": False}
