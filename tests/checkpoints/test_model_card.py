"""Every run writes the split it used and a model card whose figures are what MLflow logged."""

from __future__ import annotations

import json
import re
import shlex
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from skinet.checkpoints.model_card import MODEL_CARD_FILE, invoked_command
from skinet.cli.main import main
from skinet.config.experiment import parse_config
from skinet.datasets.locate import index_dataset
from skinet.datasets.splits import split_file_sha256, write_split_file
from skinet.tracking.mlflow_utils import resolve_tracking_uri
from skinet.training.run import run_training

SECTIONS = (
    "## Model details",
    "## Uses",
    "## Bias, risks and limitations",
    "## Training data",
    "## Training procedure",
    "## Evaluation",
    "## How to reproduce",
)


def _card_figures(card: str) -> dict[str, float]:
    rows = re.findall(r"^\| (\w+)(?: \(best epoch\))? \| ([0-9.]+) \|$", card, re.MULTILINE)
    return {name: float(value) for name, value in rows}


def test_run_honours_the_split_file_and_writes_split_and_card(
    tiny_raw: dict[str, Any], tmp_path: Path
) -> None:
    from mlflow.tracking import MlflowClient

    _, carved = index_dataset(parse_config(tiny_raw))
    ids = sorted(s.id for pairs in carved.values() for s in pairs)
    # a split unlike the official one: the last 3 ids are the test set, the 3 before are val
    wanted = {"train": ids[:-6], "val": ids[-6:-3], "test": ids[-3:]}
    split_file = write_split_file(wanted, tmp_path / "fixed_split.csv")
    tiny_raw["TRAIN_CONFIG"].update({"max_epochs": 1, "use_early_stopping": False})
    tiny_raw["DATA_CONFIG"]["split_file"] = str(split_file)
    cfg = parse_config(tiny_raw)

    result = run_training(cfg, visualize=False)

    written = result.run_dir / "splits.csv"
    assert written.read_bytes() == split_file.read_bytes()
    card = (result.run_dir / MODEL_CARD_FILE).read_text()
    for section in SECTIONS:
        assert section in card
    assert "Not a medical device" in card and "CC BY-NC 4.0" in card
    assert f"{len(ids) - 6} train, 3 val, 3 test" in card
    assert split_file_sha256(split_file) in card
    assert "split_file:" in card  # the config to reproduce it is in the card

    client = MlflowClient(resolve_tracking_uri(cfg))
    run = client.get_run(result.mlflow_run_id)
    artifacts = {a.path for a in client.list_artifacts(result.mlflow_run_id)}
    assert {"splits.csv", MODEL_CARD_FILE} <= artifacts
    figures = _card_figures(card)
    assert {"test_dice", "test_iou", "test_threshold_used", cfg.sweep.monitor} <= set(figures)
    for name, value in figures.items():
        history = client.get_metric_history(result.mlflow_run_id, name)
        logged = max(m.value for m in history) if name == cfg.sweep.monitor else None
        logged = run.data.metrics[name] if logged is None else logged
        assert value == round(logged, 4), name
    assert (
        f"threshold ({figures['test_threshold_used']:.4f}: the checkpoint's validation-optimal one)"
        in card
    )


def test_card_and_metrics_carry_the_best_checkpoints_own_epoch(
    tiny_raw: dict[str, Any], mlflow_db_template: Path
) -> None:
    import json
    import shutil

    from mlflow.tracking import MlflowClient

    # Keep the epoch with the highest validation loss: not the last one of a run that learns.
    tiny_raw["TRAIN_CONFIG"].update(
        max_epochs=3,
        lr=3e-3,
        use_early_stopping=False,
    )
    tiny_raw["SWEEP_CONFIG"] = {"monitor": "val_loss", "direction": "maximize"}
    output_dir = Path(tiny_raw["TRAIN_CONFIG"]["output_dir"])
    output_dir.mkdir(parents=True)
    shutil.copyfile(mlflow_db_template, output_dir / "mlflow.db")
    cfg = parse_config(tiny_raw)
    result = run_training(cfg, visualize=False)
    client = MlflowClient(resolve_tracking_uri(cfg))
    losses = {m.step: m.value for m in client.get_metric_history(result.mlflow_run_id, "val_loss")}
    dice = [m.value for m in client.get_metric_history(result.mlflow_run_id, "val_dice")]
    by_epoch = sorted(losses.values())  # steps grow with epochs: losses in epoch order
    per_epoch = [losses[step] for step in sorted(losses)]
    best = max(range(3), key=lambda epoch: per_epoch[epoch])
    assert best != 2, f"the test needs a best epoch before the last: {per_epoch}"
    assert result.best_checkpoint is not None and f"epoch={best:03d}" in result.best_checkpoint.name
    saved = json.loads((result.run_dir / "metrics.json").read_text())["metrics"]
    assert saved["best_epoch"] == best
    assert saved["val_loss"] == max(by_epoch)
    assert saved["val_dice"] == dice[best] != dice[-1]
    card = (result.run_dir / MODEL_CARD_FILE).read_text()
    assert f"Validation metrics of the best checkpoint (epoch {best}, 0-based)" in card
    assert _card_figures(card)["val_dice"] == round(dice[best], 4)


def test_the_card_names_a_loss_that_is_not_the_default(tmp_path: Path) -> None:
    from tests.helpers.config import tiny_raw_config

    from skinet.checkpoints.model_card import CardInputs, build_model_card

    raw = tiny_raw_config(tmp_path)
    inputs = CardInputs(run_name="r", metrics={}, monitor="val_dice", split_counts={"train": 1})
    default = build_model_card(parse_config(raw), inputs)
    assert "- Loss `BCE_DICE`, optimizer" in default
    raw["TRAIN_CONFIG"].update(bce_weight=0.25, dice_reduction="image")
    card = build_model_card(parse_config(raw), inputs)
    assert "- Loss `BCE_DICE` (BCE weight 0.25, soft Dice per image), optimizer" in card


def test_a_run_without_a_test_split_says_so_in_its_card_and_summary(
    tiny_raw: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, carved = index_dataset(parse_config(tiny_raw))
    ids = sorted(s.id for pairs in carved.values() for s in pairs)
    split_file = write_split_file({"train": ids[:-3], "val": ids[-3:]}, tmp_path / "split.csv")
    tiny_raw["TRAIN_CONFIG"].update({"max_epochs": 1, "use_mlflow_logger": False})
    tiny_raw["DATA_CONFIG"]["split_file"] = str(split_file)
    config = tmp_path / "no_test.yaml"
    config.write_text(yaml.safe_dump(tiny_raw))

    assert main(["train", "--config", str(config), "--no-visualize"]) == 0

    assert "(fit; no test split)" in capsys.readouterr().out
    (card_path,) = (tmp_path / "runs").glob(f"*/{MODEL_CARD_FILE}")
    card = card_path.read_text()
    assert "(epoch 0, 0-based); no test split was scored:" in card
    assert "test metrics at threshold" not in card
    # The two threshold rows are told apart under the table.
    legend = "`val_threshold_used` the one its `val_dice` and `val_iou` were computed at"
    assert legend in card
    assert tiny_raw["TRAIN_CONFIG"].get("precision") is None
    assert "up to 1 epoch, precision `32-true` (automatic), seed" in card  # as the CPU resolved it


def test_a_fixed_threshold_card_has_no_legend_of_a_sweep(tiny_raw: dict[str, Any]) -> None:
    tiny_raw["TRAIN_CONFIG"].update(
        {"max_epochs": 1, "use_mlflow_logger": False, "optimal_threshold": 0.5}
    )
    result = run_training(parse_config(tiny_raw), visualize=False)
    card = (result.run_dir / MODEL_CARD_FILE).read_text()
    assert "| val_threshold_used | 0.5000 |" in card
    assert "the previous epoch's choice" not in card


@pytest.mark.parametrize(
    ("argv0", "typed"),
    [
        ("/venv/bin/skinet", "skinet train --config 'my run.yaml'"),
        ("/src/skinet/__main__.py", "python -m skinet train --config 'my run.yaml'"),
        ("main_run.py", "python main_run.py train --config 'my run.yaml'"),
    ],
)
def test_the_cards_command_is_one_a_user_can_type_again(
    monkeypatch: pytest.MonkeyPatch, argv0: str, typed: str
) -> None:
    monkeypatch.setattr(sys, "argv", [argv0, "train", "--config", "my run.yaml"])
    assert invoked_command() == typed


def test_the_cards_reproduce_command_trains_the_same_run_again(
    tiny_raw: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tiny_raw["TRAIN_CONFIG"].update({"max_epochs": 1, "use_mlflow_logger": False})
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(tiny_raw))
    monkeypatch.chdir(tmp_path)
    # A seed given by --set: the card's command must carry it without the --set.
    typed = ["skinet", "train", "--config", "c.yaml", "--set", "TRAIN_CONFIG.seed=7"]
    monkeypatch.setattr(sys, "argv", typed)
    assert main(typed[1:]) == 0
    (first,) = (tmp_path / "runs").glob("*/MODEL_CARD.md")
    card = first.read_text()
    assert f"From `{tmp_path}`" in card
    assert f"Made by `{shlex.join(typed)}`." in card
    command = card.split("## How to reproduce")[1].split("```bash\n")[1].split("\n```")[0]
    assert command == f"skinet train --config runs/{first.parent.name}/config.yaml"
    assert main(shlex.split(command)[1:]) == 0
    again = [p for p in (tmp_path / "runs").glob("*/metrics.json") if p.parent != first.parent]
    metrics = [
        json.loads(p.read_text())["metrics"] for p in (first.parent / "metrics.json", *again)
    ]
    assert len(metrics) == 2 and metrics[0]["test_dice"] == metrics[1]["test_dice"]
    assert "_seed7_" in again[0].parent.name
