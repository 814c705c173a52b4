"""``skinet info`` and ``skinet --version``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from skinet import __version__
from skinet.cli.main import main

REPO = Path(__file__).resolve().parents[2]


def test_version_flag(capsys) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out.strip() == f"skinet {__version__}"


def test_info_reports_versions_devices_and_data_roots(tmp_path: Path, capsys) -> None:
    config = tmp_path / "c.yaml"
    config.write_text(
        yaml.safe_dump({"DATA_CONFIG": {"data_dir": "ISIC2017", "local_data_root": str(tmp_path)}})
    )
    (tmp_path / "ISIC2017").mkdir()
    assert main(["info", "--config", str(config)]) == 0
    out = capsys.readouterr().out
    for label in ("SkiNet: ", "Python: ", "torch: ", "CUDA available: ", "MPS available: "):
        assert label in out
    for package in ("lightning", "mlflow", "optuna", "albumentations"):
        assert f"\n{package}: " in out
    assert f"CPUs: {os.cpu_count()}" in out
    assert f"{tmp_path / 'ISIC2017'}  [found]" in out


def _python(script: str) -> str:
    """The output of ``script`` run by a fresh interpreter on this checkout's ``src``."""
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300, env=env
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


@pytest.mark.process
def test_info_survives_missing_packages_and_no_nvml() -> None:
    # The packages are hidden from the import system as if they were not installed.
    script = (
        "import sys\n"
        "for name in ('mlflow', 'optuna', 'pynvml', 'lightning', 'albumentations'):\n"
        "    sys.modules[name] = None\n"
        "from skinet.cli.info import collect_info\n"
        "print('\\n'.join(collect_info()))\n"
    )
    stdout = _python(script)
    assert "mlflow: not installed" in stdout
    assert "optuna: not installed" in stdout
    assert "NVML: not installed" in stdout
    assert "torch: " in stdout


@pytest.mark.process
def test_info_reads_versions_without_importing_the_libraries() -> None:
    """The versions come from the installed distributions' metadata, the way pip reports them."""
    script = (
        "import sys\n"
        "from importlib.metadata import version\n"
        "from skinet.cli.info import collect_info\n"
        "lines = collect_info()\n"
        "print('\\n'.join(lines))\n"
        "print('IMPORTED', *sorted({'lightning', 'mlflow', 'optuna'} & set(sys.modules)))\n"
        "print('EXPECTED', version('lightning'), version('optuna'))\n"
    )
    stdout = _python(script)
    lines = stdout.splitlines()
    assert "IMPORTED" in lines
    lightning, optuna = next(ln for ln in lines if ln.startswith("EXPECTED")).split()[1:]
    assert f"lightning: {lightning}" in lines and f"optuna: {optuna}" in lines
    package = Path(lines[0].split("(", 1)[1].rstrip(")"))
    assert (package / "__init__.py").is_file() and package.name == "skinet"
