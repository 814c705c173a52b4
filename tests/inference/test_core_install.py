"""Prediction needs only the core install: no training, tracking or sweep library is imported.

The default-suite tests run ``skinet`` in a subprocess whose import system refuses the training
extra's libraries; the ``slow`` one installs the core package alone into a fresh venv.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
import venv
from pathlib import Path

import cv2
import numpy as np
import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
TRAINING_ONLY = ("lightning", "torchmetrics", "albumentations", "mlflow", "optuna")

# Runs each `skinet ARGS...` of the JSON list in argv[1] with TRAINING_ONLY refused as if not
# installed; prints each exit status, then which of them (or their companions) got imported.
_BLOCKED_RUN = textwrap.dedent(
    """
    import json, sys

    BLOCKED = set({blocked!r})

    class RefuseTrainingLibraries:
        def find_spec(self, name, path=None, target=None):
            if name.partition(".")[0] in BLOCKED:
                raise ModuleNotFoundError(f"No module named {{name!r}} (blocked)", name=name)
            return None

    sys.meta_path.insert(0, RefuseTrainingLibraries())
    from skinet.cli.main import main

    statuses = [main(argv) for argv in json.loads(sys.argv[1])]
    heavy = {{"pytorch_lightning", "psutil", *BLOCKED}}
    loaded = sorted({{m.partition(".")[0] for m in sys.modules}} & heavy)
    print("RESULT " + json.dumps({{"statuses": statuses, "imported": loaded}}))
    """
)


def _run_blocked(commands: list[list[str]], cwd: Path) -> tuple[dict, str]:
    """The statuses and imports of ``commands`` run in one fresh interpreter, and its output."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "src"), str(REPO)])}
    env["COLUMNS"] = "200"  # rich wraps log lines at the terminal width
    code = _BLOCKED_RUN.format(blocked=TRAINING_ONLY)
    result = subprocess.run(
        [sys.executable, "-c", code, json.dumps(commands)],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=300,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-3000:]
    line = next(line for line in result.stdout.splitlines() if line.startswith("RESULT "))
    return json.loads(line.removeprefix("RESULT ")), output


def _image_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "images"
    folder.mkdir()
    rng = np.random.default_rng(0)
    for name in ("a", "b"):
        image = rng.integers(0, 255, (40, 48, 3), dtype=np.uint8)
        assert cv2.imwrite(str(folder / f"{name}.png"), image)
    return folder


@pytest.mark.process
def test_predict_evaluate_export_import_no_training_library(
    trained_checkpoint: Path, tmp_path: Path
) -> None:
    checkpoint = str(trained_checkpoint)
    commands = {
        "predict": [
            "predict",
            *("--checkpoint", checkpoint, "--images", str(_image_folder(tmp_path))),
            *("--output", str(tmp_path / "masks"), "--device", "cpu"),
        ],
        "evaluate": [
            "evaluate",
            *("--checkpoint", checkpoint, "--output", str(tmp_path / "eval"), "--device", "cpu"),
        ],
        "export": [
            "export",
            *("--checkpoint", checkpoint, "--format", "torchscript"),
            *("--output", str(tmp_path / "model.pt")),
        ],
    }
    result, output = _run_blocked(list(commands.values()), tmp_path)
    assert result == {"statuses": [0, 0, 0], "imported": []}, output[-3000:]
    assert sorted(p.name for p in (tmp_path / "masks").iterdir()) == [
        "a_mask.png",
        "b_mask.png",
        "predictions.json",
    ]
    assert (tmp_path / "eval" / "summary.json").is_file()
    assert (tmp_path / "model.pt").is_file()


@pytest.mark.process
def test_training_commands_without_the_extra_say_what_to_install(
    tmp_path: Path, tiny_raw: dict
) -> None:
    config = tmp_path / "tiny.yaml"
    config.write_text(yaml.safe_dump(tiny_raw))
    commands = [["train", "--config", str(config)], ["sweep", "--config", str(config)]]
    commands.append(["cv", "--config", str(config), "--folds", "2"])
    commands.append(["config", "check", "--config", str(config)])
    result, output = _run_blocked(commands, tmp_path)
    message = " ".join(output.split())
    assert result["statuses"] == [2, 2, 2, 0], output[-3000:]
    assert "Traceback" not in output
    for command in ("train", "sweep", "cv"):
        assert f"skinet {command} needs the training extra: pip install 'skinet[train]'" in message
    assert "(missing: lightning, torchmetrics, albumentations)" in message
    assert "(missing: lightning, torchmetrics, albumentations, optuna)" in message
    assert not (tmp_path / "runs").exists(), "nothing is written before the check"
    # config check still validates the rest, and says what it could not check.
    assert "TRANSFORM_CONFIG was not checked: albumentations is not installed" in message
    assert result["imported"] == []


@pytest.mark.process
@pytest.mark.slow
@pytest.mark.timeout(1800)  # pip resolves and installs ~40 packages: about 5 minutes on 2 cores
def test_core_install_in_a_fresh_venv_predicts(trained_checkpoint: Path, tmp_path: Path) -> None:
    """``pip install skinet`` (no extra) into a new venv, then ``skinet predict`` writes masks."""
    started = time.monotonic()
    env_dir = tmp_path / "core-venv"
    venv.create(env_dir, with_pip=True)
    python = env_dir / "bin" / "python"
    pip = [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    constraints = ["-c", str(REPO / "constraints.txt")]
    # torch first and pinned: an unpinned resolve could fetch a multi-GB CUDA build.
    subprocess.run([*pip, *constraints, "torch"], check=True, timeout=900)
    subprocess.run([*pip, *constraints, str(REPO)], check=True, timeout=900)
    installed = subprocess.run(
        [str(python), "-m", "pip", "list", "--format", "json"],
        check=True,
        capture_output=True,
        text=True,
    )
    names = {p["name"].lower() for p in json.loads(installed.stdout)}
    assert not names & {"lightning", "torchmetrics", "albumentations", "mlflow", "optuna"}

    out = tmp_path / "masks"
    skinet = env_dir / "bin" / "skinet"
    argv = ["predict", "--checkpoint", str(trained_checkpoint), "--device", "cpu"]
    argv += ["--images", str(_image_folder(tmp_path)), "--output", str(out)]
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["COLUMNS"] = "200"
    result = subprocess.run(
        [str(skinet), *argv], capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300
    )
    assert result.returncode == 0, result.stderr[-3000:]
    mask = cv2.imread(str(out / "a_mask.png"), cv2.IMREAD_UNCHANGED)
    assert mask.shape == (40, 48) and set(np.unique(mask)) <= {0, 255}

    train = subprocess.run(
        [str(skinet), "train", "--config", str(REPO / "configs" / "quickstart.yaml")],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=300,
    )
    assert train.returncode == 2, train.stdout[-3000:] + train.stderr[-3000:]
    assert "pip install 'skinet[train]'" in " ".join((train.stdout + train.stderr).split())

    # The wheel brings the configs of the clone: config init copies one out, unchanged.
    init = subprocess.run(
        [str(skinet), "config", "init", "cpu_budget"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=120,
    )
    assert init.returncode == 0, init.stderr[-3000:]
    shipped = (REPO / "configs" / "cpu_budget.yaml").read_bytes()
    assert (tmp_path / "cpu_budget.yaml").read_bytes() == shipped
    print(f"core venv built and predicted in {time.monotonic() - started:.0f} s")


@pytest.mark.process
def test_a_checkpoint_trained_on_the_device_path_predicts_on_the_core_install(
    tmp_path: Path, synthetic_root: Path
) -> None:
    """``augment_on: device`` names transforms only training builds: reading the checkpoint's
    config to predict must not need albumentations or the device pipeline."""
    from tests.helpers.config import tiny_raw_config

    from skinet.config.experiment import parse_config
    from skinet.training.run import run_training

    raw = tiny_raw_config(tmp_path, synthetic_root)
    raw["TRAIN_CONFIG"].update(max_epochs=1, use_mlflow_logger=False, augment_on="device")
    result = run_training(parse_config(raw), visualize=False)
    assert result.best_checkpoint is not None
    predict = [
        "predict",
        *("--checkpoint", str(result.best_checkpoint), "--images", str(_image_folder(tmp_path))),
        *("--output", str(tmp_path / "masks"), "--device", "cpu"),
    ]
    outcome, output = _run_blocked([predict], tmp_path)
    assert outcome == {"statuses": [0], "imported": []}, output[-3000:]
    assert sorted(p.name for p in (tmp_path / "masks").iterdir()) == [
        "a_mask.png",
        "b_mask.png",
        "predictions.json",
    ]
