"""Every row of the "What SkiNet tells you" table in docs/debugging.md, run through ``main``.

Each case writes a bad input under ``tmp_path``, runs the command a user would type and checks
the exit status and the message the table promises. The table and these cases are kept equal by
:func:`test_the_docs_table_lists_exactly_these_cases`.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import pytest
import torch
import yaml
from tests.helpers.config import tiny_raw_config
from tests.helpers.inference import another_source_model

from skinet.checkpoints.format import FORMAT_VERSION
from skinet.cli.main import main
from skinet.datasets.layouts import ISIC2017_FOLDERS

DOCS = Path(__file__).resolve().parents[2] / "docs" / "debugging.md"


@dataclass
class Setup:
    """Paths of one case: a tiny config file, a private copy of the dataset, the run folder."""

    tmp: Path
    data: Path
    raw: dict[str, Any]

    def config(self, **sections: dict[str, Any]) -> str:
        raw = {**self.raw}
        for section, values in sections.items():
            raw[section] = {**raw.get(section, {}), **values}
        path = self.tmp / "config.yaml"
        path.write_text(yaml.safe_dump(raw))
        return str(path)

    @property
    def runs(self) -> Path:
        return Path(self.raw["TRAIN_CONFIG"]["output_dir"])


def _train_masks(data: Path) -> list[Path]:
    return sorted((data / ISIC2017_FOLDERS["train"][1]).glob("*.png"))


def _train_images(data: Path) -> list[Path]:
    return sorted((data / ISIC2017_FOLDERS["train"][0]).glob("*.jpg"))


def _text_file(path: Path) -> Path:
    path.write_text("<html><body>404 Not Found</body></html>\n")
    return path


def _broken_folder(s: Setup) -> None:
    """One pairing problem (a missing mask) and two decode problems in one folder."""
    _train_masks(s.data)[0].unlink()
    _text_file(_train_images(s.data)[1])
    truncated = _train_images(s.data)[2]
    truncated.write_bytes(truncated.read_bytes()[:200])


def _config_not_found(s: Setup) -> list[str]:
    return ["train", "--config", str(s.tmp / "configs" / "cpu_budget.yaml")]


def _data_dir_not_found(s: Setup) -> list[str]:
    return ["data", "verify", "--data-dir", str(s.tmp / "ISIC2017")]


def _std_zero(s: Setup) -> list[str]:
    return ["config", "check", "--config", s.config(DATA_CONFIG={"std": [0, 0.2, 0.2]})]


def _std_negative(s: Setup) -> list[str]:
    return ["train", "--config", s.config(), "--set", "DATA_CONFIG.std=[-0.1, 0.2, 0.2]"]


def _mean_nan(s: Setup) -> list[str]:
    return ["config", "check", "--config", s.config(), "--set", "DATA_CONFIG.mean=[.nan, 0, .inf]"]


def _list_yaml(s: Setup) -> list[str]:
    path = s.tmp / "list.yaml"
    path.write_text("- TRAIN_CONFIG\n- MODEL_CONFIG\n")
    return ["train", "--config", str(path), "--set", "TRAIN_CONFIG.max_epochs=1"]


def _unknown_key(s: Setup) -> list[str]:
    return ["config", "check", "--config", s.config(TRAIN_CONFIG={"max_epoch": 3})]


def _unknown_nested_key(s: Setup) -> list[str]:
    config = s.config(TRAIN_CONFIG={"early_stopping_config": {"patiance": 3}})
    return ["config", "check", "--config", config]


def _unknown_section(s: Setup) -> list[str]:
    return ["config", "check", "--config", s.config(), "--set", "TRAIN_CONFG.max_epochs=3"]


def _set_bad_yaml(s: Setup) -> list[str]:
    return ["config", "show", "--config", s.config(), "--set", "TRAIN_CONFIG.lr=[0.1"]


def _set_below_a_value(s: Setup) -> list[str]:
    return ["config", "show", "--config", s.config(), "--set", "TRAIN_CONFIG.batch_size.x=1"]


def _mode_mismatch(s: Setup) -> list[str]:
    config = s.config(TRAIN_CONFIG={"early_stopping_config": {"mode": "min"}})
    return ["train", "--config", config]


def _pairing_and_decode(s: Setup) -> list[str]:
    _broken_folder(s)
    return ["train", "--config", s.config()]


def _text_as_jpg(s: Setup) -> list[str]:
    _text_file(_train_images(s.data)[0])
    return ["data", "verify", "--data-dir", str(s.data)]


def _grey_mask(s: Setup) -> list[str]:
    for mask in _train_masks(s.data)[:2]:
        size = cv2.imread(str(mask), cv2.IMREAD_GRAYSCALE).shape
        gradient = np.linspace(0, 255, size[1], dtype=np.uint8)[None].repeat(size[0], 0)
        assert cv2.imwrite(str(mask), gradient)
    return ["data", "verify", "--data-dir", str(s.data)]


def _set_unknown_key(s: Setup) -> list[str]:
    return ["config", "check", "--config", s.config(), "--set", "TRAIN_CONFIG.max_epoch=3"]


def _image_size_too_small(s: Setup) -> list[str]:
    depth = ["--set", "MODEL_CONFIG.number_of_layers=7"]
    return ["config", "check", "--config", s.config(), *depth, "--set", "DATA_CONFIG.image_size=32"]


def _resume_not_found(s: Setup) -> list[str]:
    return ["train", "--config", s.config(), "--resume", str(s.tmp / "runs" / "last.ckpt")]


def _init_from_not_found(s: Setup) -> list[str]:
    return ["train", "--config", s.config(), "--init-from", str(s.tmp / "source.ckpt")]


def _masks_renamed(s: Setup) -> list[str]:
    for mask in _train_masks(s.data):  # 8 masks: 8 missing and 8 orphans
        mask.rename(mask.with_name(mask.name.replace("_segmentation", "_mask")))
    return ["train", "--config", s.config()]


def _empty_masks(s: Setup) -> list[str]:
    for mask in _train_masks(s.data):
        size = cv2.imread(str(mask), cv2.IMREAD_GRAYSCALE).shape
        assert cv2.imwrite(str(mask), np.zeros(size, np.uint8))
    return ["data", "verify", "--data-dir", str(s.data)]


def _resume_not_checkpoint(s: Setup) -> list[str]:
    path = _text_file(s.tmp / "last.ckpt")
    return ["train", "--config", s.config(), "--resume", str(path)]


def _predict_not_checkpoint(s: Setup) -> list[str]:
    path = _text_file(s.tmp / "best.ckpt")
    image = _train_images(s.data)[0]
    return ["predict", "--checkpoint", str(path), "--images", str(image), "--output", "out"]


def _resume_foreign_checkpoint(s: Setup) -> list[str]:
    torch.save({"state_dict": {}, "epoch": 0}, s.tmp / "other.ckpt")
    return ["train", "--config", s.config(), "--resume", str(s.tmp / "other.ckpt")]


def _evaluate_no_common_ids(s: Setup) -> list[str]:
    predictions, truth = s.tmp / "pred", s.tmp / "truth"
    predictions.mkdir()
    truth.mkdir()
    mask = np.zeros((8, 8), np.uint8)
    cv2.imwrite(str(predictions / "photo_1_mask.png"), mask)
    cv2.imwrite(str(truth / "ISIC_0000001_segmentation.png"), mask)
    output = s.tmp / "report"
    return ["evaluate", "--predictions", str(predictions), "--masks", str(truth),
            "--output", str(output)]  # fmt: skip


def _evaluate_without_inputs(s: Setup) -> list[str]:
    return ["evaluate", "--output", str(s.tmp / "report")]


def _verify_without_source(s: Setup) -> list[str]:
    return ["data", "verify"]


def _seeds_duplicated(s: Setup) -> list[str]:
    return ["seeds", "--config", s.config(), "--seeds", "1", "1"]


def _batch_size_zero(s: Setup) -> list[str]:
    return ["predict", "--checkpoint", "x.ckpt", "--images", ".", "--output", "o", "--batch-size",
            "0"]  # fmt: skip


def _budget_schedule_without_budget(s: Setup) -> list[str]:
    return ["train", "--config", s.config(), "--set", "TRAIN_CONFIG.scheduler_type=cosine_budget"]


def _compare_one_model(s: Setup) -> list[str]:
    return ["compare", str(s.data), "--external", f"a={s.data}:{s.data}"]


def _compare_paired_runs_unequal(s: Setup) -> list[str]:
    runs = f"A={s.data},{s.data}"
    return ["compare", runs, f"B={s.data}", "--paired-runs", "--external", f"a={s.data}:{s.data}"]


def _compare_paired_runs_other_sources(s: Setup) -> list[str]:
    """Two source models and their calibrated copies, the copies given in the other order."""
    assert main(["train", "--config", s.config(TRAIN_CONFIG={"use_mlflow_logger": False})]) == 0
    (run,) = s.runs.iterdir()
    first = next((run / "checkpoints").glob("best*.ckpt"))
    second = another_source_model(first, s.tmp / "second.ckpt")
    for source, copy in ((first, "cal_first.ckpt"), (second, "cal_second.ckpt")):
        tune = ["evaluate", "--checkpoint", str(source), "--split", "val", "--tune-threshold"]
        out = ["--save-calibrated", str(s.tmp / copy), "--output", str(s.tmp / copy[:-5])]
        assert main([*tune, *out]) == 0
    models = [
        f"source={first},{second}",
        f"cal={s.tmp / 'cal_second.ckpt'},{s.tmp / 'cal_first.ckpt'}",
    ]
    return ["compare", *models, "--paired-runs", "--split", "test",
            "--output", str(s.tmp / "report")]  # fmt: skip


def _save_calibrated_exists(s: Setup) -> list[str]:
    (s.tmp / "clinic.ckpt").write_bytes(b"mine")
    argv = ["evaluate", "--checkpoint", "x.ckpt", "--split", "val", "--tune-threshold"]
    return [
        *argv,
        "--save-calibrated",
        str(s.tmp / "clinic.ckpt"),
        "--output",
        str(s.tmp / "report"),
    ]


def _resume_changes_preprocessing(s: Setup) -> list[str]:
    config = s.config(TRAIN_CONFIG={"use_mlflow_logger": False})
    assert main(["train", "--config", config, "--no-visualize"]) == 0
    changes = ["DATA_CONFIG.reduced_jpeg_decode=false", "TRAIN_CONFIG.max_epochs=2"]
    return ["train", "--config", config, "--resume", "last",
            *(x for c in changes for x in ("--set", c))]  # fmt: skip


def _kept(s: Setup) -> None:
    assert (s.tmp / "clinic.ckpt").read_bytes() == b"mine"
    assert not (s.tmp / "report").exists()


def _external_named_like_a_report(s: Setup) -> list[str]:
    images, masks = ISIC2017_FOLDERS["train"]
    external = f"summary.json={s.data / images}:{s.data / masks}"
    argv = ["evaluate", "--checkpoint", "x.ckpt", "--split", "test", "--external", external]
    return [*argv, "--output", str(s.tmp / "report")]


def _predict_into_a_masks_folder(s: Setup) -> list[str]:
    images, masks = s.tmp / "images", s.tmp / "masks"
    images.mkdir()
    masks.mkdir()
    shutil.copy(_train_images(s.data)[0], images / "photo.jpg")
    (masks / "photo_mask.png").write_bytes(b"ground truth")
    argv = ["predict", "--checkpoint", "x.ckpt", "--images", str(images)]
    return [*argv, "--output", str(masks)]


def _masks_kept(s: Setup) -> None:
    assert [p.name for p in (s.tmp / "masks").iterdir()] == ["photo_mask.png"]
    assert (s.tmp / "masks" / "photo_mask.png").read_bytes() == b"ground truth"


def _checkpoint_newer_format(s: Setup) -> list[str]:
    newer = {"config": {}, "format_version": FORMAT_VERSION + 1}
    torch.save({"skinet": newer, "state_dict": {}}, s.tmp / "n.ckpt")
    image = _train_images(s.data)[0]
    return [
        "predict",
        "--checkpoint",
        str(s.tmp / "n.ckpt"),
        "--images",
        str(image),
        "--output",
        "out",
    ]


def _ensemble_test_leaked(s: Setup) -> list[str]:
    """One tiny run, and a copy of it whose recorded split swaps a test and a training image:
    as if carved with another split_random_seed."""
    from skinet.datasets.splits import read_split_file, write_split_file

    assert main(["train", "--config", s.config(TRAIN_CONFIG={"use_mlflow_logger": False})]) == 0
    (run,) = s.runs.iterdir()
    other = shutil.copytree(run, s.tmp / "other_run")
    assignment = read_split_file(other / "splits.csv")
    test = min(i for i, split in assignment.items() if split == "test")
    train = min(i for i, split in assignment.items() if split == "train")
    assignment[test], assignment[train] = "train", "test"
    splits: dict[str, list[str]] = {}
    for sample_id, split in assignment.items():
        splits.setdefault(split, []).append(sample_id)
    write_split_file(splits, other / "splits.csv")
    members = [str(next((folder / "checkpoints").glob("best*.ckpt"))) for folder in (run, other)]
    return [
        "evaluate",
        "--checkpoint",
        *members,
        "--split",
        "test",
        "--output",
        str(s.tmp / "report"),
    ]


def _compare_cv_folder_leaked(s: Setup) -> list[str]:
    """The two runs above as the folds of a cv folder, compared on the first one's test split."""
    import json

    members = _ensemble_test_leaked(s)[2:4]
    cv_dir = s.tmp / "cv_tiny_k2"
    (cv_dir / "results").mkdir(parents=True)
    for fold, member in enumerate(members, start=1):
        record = {"fold": fold, "best_checkpoint": member}
        (cv_dir / "results" / f"fold_{fold}.json").write_text(json.dumps(record))
    return ["compare", f"one={members[0]}", f"folds={cv_dir}", "--split", "test",
            "--output", str(s.tmp / "report")]  # fmt: skip


def _cv_rerun_config_changed(s: Setup) -> list[str]:
    """A cv folder whose first fold finished with lr 0.001, as ``skinet cv`` records it."""
    import json

    from skinet.config.experiment import parse_config
    from skinet.experiments.cv import config_hash, cv_folder, fold_config

    cfg = parse_config(s.raw)
    result = cv_folder(cfg, 2) / "results" / "fold_1.json"
    result.parent.mkdir(parents=True)
    result.write_text(
        json.dumps({"fold": 1, "config_sha256": config_hash(cfg), "config": fold_config(cfg)})
    )
    return ["cv", "--config", s.config(), "--folds", "2", "--set", "TRAIN_CONFIG.lr=0.05"]


def _predict_into_a_file(s: Setup) -> list[str]:
    (s.tmp / "masks.png").write_bytes(b"mine")
    image = _train_images(s.data)[0]
    argv = ["predict", "--checkpoint", "x.ckpt", "--images", str(image)]
    return [*argv, "--output", str(s.tmp / "masks.png")]


def _evaluate_into_a_file(s: Setup) -> list[str]:
    (s.tmp / "report").write_bytes(b"mine")
    argv = ["evaluate", "--checkpoint", "x.ckpt", "--split", "test"]
    return [*argv, "--output", str(s.tmp / "report")]


def _robustness_into_a_file(s: Setup) -> list[str]:
    (s.tmp / "report").write_bytes(b"mine")
    return ["robustness", "--checkpoint", "x.ckpt", "--output", str(s.tmp / "report")]


def _compare_into_a_file(s: Setup) -> list[str]:
    (s.tmp / "report").write_bytes(b"mine")
    models = [str(s.tmp / "a"), str(s.tmp / "b")]
    for folder in models:  # two (empty) folders of predicted masks
        Path(folder).mkdir()
    return ["compare", *models, "--split", "test", "--output", str(s.tmp / "report")]


def _file_kept(s: Setup) -> None:
    # Refused before the checkpoint (x.ckpt does not exist) is read; the file is untouched.
    kept = s.tmp / ("masks.png" if (s.tmp / "masks.png").exists() else "report")
    assert kept.read_bytes() == b"mine"


@dataclass
class Case:
    """A bad input, the command run on it, and what SkiNet must answer."""

    make: Callable[[Setup], list[str]]
    exit_code: int
    message: str
    check: Callable[[Setup], None] | None = None


def _nothing_written(s: Setup) -> None:
    assert not (s.tmp / "report").exists()


def _no_run_folder(s: Setup) -> None:
    # Neither a run folder holding only config.yaml nor an MLflow store with an empty experiment.
    assert not s.runs.exists() or not any(s.runs.iterdir())


CASES: dict[str, Case] = {
    "config-not-found": Case(
        _config_not_found,
        2,
        "`skinet config init cpu_budget --output ",
        _no_run_folder,
    ),
    "data-dir-not-found": Case(_data_dir_not_found, 2, "ISIC2017: no such folder"),
    "std-zero": Case(
        _std_zero, 2, "DATA_CONFIG.std: every channel std must be a finite number > 0"
    ),
    "std-negative": Case(_std_negative, 2, "DATA_CONFIG.std: every channel std must be"),
    "mean-nan-inf": Case(_mean_nan, 2, "DATA_CONFIG.mean: every channel mean must be a finite"),
    "yaml-list": Case(_list_yaml, 2, "top level must be a mapping of sections"),
    "unknown-key": Case(
        _unknown_key, 2, "TRAIN_CONFIG.max_epoch: unknown key; did you mean max_epochs?"
    ),  # noqa: E501
    "unknown-nested-key": Case(
        _unknown_nested_key,
        2,
        "TRAIN_CONFIG.early_stopping_config.patiance: unknown key; did you mean patience?",
    ),
    "unknown-section": Case(
        _unknown_section, 2, "TRAIN_CONFG: unknown key; did you mean TRAIN_CONFIG?"
    ),  # noqa: E501
    "set-unknown-key": Case(
        _set_unknown_key,
        2,
        "with --set TRAIN_CONFIG.max_epoch: TRAIN_CONFIG.max_epoch: unknown key; did you mean",
    ),
    "image-size-too-small": Case(
        _image_size_too_small,
        2,
        "DATA_CONFIG.image_size 32 is too small for MODEL_CONFIG.number_of_layers 7 with stride 2",
    ),
    "set-bad-yaml": Case(_set_bad_yaml, 2, "the value is not valid YAML"),
    "set-below-a-value": Case(_set_below_a_value, 2, "TRAIN_CONFIG.batch_size is 4, not a section"),
    "mode-mismatch": Case(
        _mode_mismatch,
        2,
        "TRAIN_CONFIG.early_stopping_config.mode is 'min' but SWEEP_CONFIG.direction is 'maximize'",
    ),
    "pairing-and-decode": Case(_pairing_and_decode, 1, "has 3 problem(s)", _no_run_folder),
    "text-as-jpg": Case(_text_as_jpg, 1, "not a JPEG file"),
    "grey-mask": Case(_grey_mask, 0, "2 of 8 mask(s) of split train have grey values"),
    "many-problems": Case(
        _masks_renamed,
        1,
        "... and 7 more (skinet data verify lists every one)",
        _no_run_folder,
    ),
    "empty-masks": Case(_empty_masks, 0, "every one of the 8 mask(s) of split train is empty"),
    "resume-not-found": Case(
        _resume_not_found, 2, "checkpoint to resume from not found:", _no_run_folder
    ),
    "init-from-not-found": Case(
        _init_from_not_found,
        2,
        "TRAIN_CONFIG.init_checkpoint: checkpoint not found:",
        _no_run_folder,
    ),
    "resume-not-checkpoint": Case(_resume_not_checkpoint, 1, "is not a checkpoint"),
    "resume-foreign-checkpoint": Case(_resume_foreign_checkpoint, 1, "is not a SkiNet checkpoint"),
    "predict-not-checkpoint": Case(_predict_not_checkpoint, 1, "is not a checkpoint"),
    "evaluate-no-common-ids": Case(
        _evaluate_no_common_ids, 1, "has the ID of a ground-truth mask", _nothing_written
    ),
    "evaluate-without-inputs": Case(_evaluate_without_inputs, 2, "give --checkpoint"),
    "verify-without-source": Case(_verify_without_source, 2, "give --config or --data-dir"),
    "seeds-duplicated": Case(_seeds_duplicated, 2, "--seeds has duplicates"),
    "batch-size-zero": Case(_batch_size_zero, 2, "expected an integer >= 1, got 0"),
    "budget-schedule-without-budget": Case(
        _budget_schedule_without_budget, 2, "cosine_budget anneals over the time budget"
    ),
    "compare-one-model": Case(_compare_one_model, 2, "compare needs two models or more"),
    "compare-paired-runs-unequal": Case(
        _compare_paired_runs_unequal, 2, "--paired-runs needs as many runs of every model"
    ),
    "compare-paired-runs-other-sources": Case(
        _compare_paired_runs_other_sources,
        2,
        "--paired-runs pairs run 1 of every model, but those runs come from different source",
        _nothing_written,
    ),
    "save-calibrated-exists": Case(_save_calibrated_exists, 2, "already exist(s)", _kept),
    "external-named-like-a-report": Case(
        _external_named_like_a_report,
        2,
        "--external summary.json=...: the set's reports go into the folder",
        _nothing_written,
    ),
    "predict-output-not-skinets": Case(
        _predict_into_a_masks_folder, 2, "did not write", _masks_kept
    ),
    "checkpoint-newer-format": Case(
        _checkpoint_newer_format,
        1,
        f"written in checkpoint format {FORMAT_VERSION + 1}, but this SkiNet reads",
    ),
    "ensemble-test-leaked": Case(
        _ensemble_test_leaked, 2, "--split test of this ensemble is leaked", _nothing_written
    ),
    "compare-cv-folder-leaked": Case(
        _compare_cv_folder_leaked, 2, "--split test of this ensemble is leaked", _nothing_written
    ),
    "cv-rerun-config-changed": Case(
        _cv_rerun_config_changed, 2, "this config changes TRAIN_CONFIG.lr: 0.001 -> 0.05"
    ),
    "resume-changes-preprocessing": Case(
        _resume_changes_preprocessing, 1, "DATA_CONFIG.reduced_jpeg_decode: True -> False"
    ),
    "predict-output-is-a-file": Case(
        _predict_into_a_file, 2, "is a file: give a folder", _file_kept
    ),
    "evaluate-output-is-a-file": Case(
        _evaluate_into_a_file, 2, "is a file: give a folder", _file_kept
    ),
    "robustness-output-is-a-file": Case(
        _robustness_into_a_file, 2, "is a file: give a folder", _file_kept
    ),
    "compare-output-is-a-file": Case(
        _compare_into_a_file, 2, "is a file: give a folder", _file_kept
    ),
    "mistyped-required-option": Case(
        lambda s: ["predict", "--chekpoint", "m.ckpt", "-i", "in", "-o", "out"],
        2,
        "unrecognized argument --chekpoint (did you mean --checkpoint?)",
    ),
    "mistyped-option": Case(
        lambda s: ["predict", "--checkpoint", "m.ckpt", "-i", "in", "-o", "out", "--tresh", "0.3"],
        2,
        "skinet predict: error: unrecognized arguments: --tresh 0.3 (did you mean --threshold?)",
    ),
    "option-given-twice": Case(
        lambda s: ["predict", "--checkpoint", "m.ckpt", "--input", "a", "--images", "b", "-o", "o"],
        2,
        "--input and --images are the same option: give it once",
    ),
}


def _run(argv: list[str]) -> int:
    try:
        return main(argv)
    except SystemExit as exit_:  # argparse's own usage errors
        return int(exit_.code or 0)


@pytest.mark.parametrize("name", list(CASES))
def test_bad_input_gets_its_message(
    name: str, tmp_path: Path, synthetic_root: Path, caplog, capsys, monkeypatch
) -> None:
    case = CASES[name]
    data = tmp_path / "data"
    shutil.copytree(synthetic_root, data)
    raw = tiny_raw_config(tmp_path, data)
    raw["TRAIN_CONFIG"].update(use_early_stopping=False, max_epochs=1)
    setup = Setup(tmp_path, data, raw)
    argv = case.make(setup)
    monkeypatch.chdir(tmp_path)
    code = _run(argv)
    captured = capsys.readouterr()
    said = re.sub(r"\s+", " ", caplog.text + captured.out + captured.err)
    assert case.message in said, said[-3000:]
    assert code == case.exit_code, said[-3000:]
    if case.check is not None:
        case.check(setup)


def test_pairing_and_decode_problems_are_listed_together(
    tmp_path: Path, synthetic_root: Path, caplog
) -> None:
    data = tmp_path / "data"
    shutil.copytree(synthetic_root, data)
    _broken_folder(Setup(tmp_path, data, {}))
    raw = tiny_raw_config(tmp_path, data)
    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump(raw))
    assert main(["train", "--config", str(config)]) == 1
    text = caplog.text
    assert "missing mask" in text and "not a JPEG file" in text and "truncated" in text


def test_the_docs_table_lists_exactly_these_cases() -> None:
    rows = re.findall(r"^\| `([a-z0-9-]+)` \|(.+)\|$", DOCS.read_text(), re.MULTILINE)
    documented = {name: row for name, row in rows}
    assert sorted(documented) == sorted(CASES)
    for name, case in CASES.items():
        assert case.message.split(" ")[0] in documented[name], name


@pytest.mark.parametrize(
    ("names", "said"),
    [
        (["SUMMARY.JSON"], "which is the name of a report evaluate writes"),
        (["clinic", "Clinic"], "--external names must differ (also in upper/lower case)"),
    ],
)
def test_external_names_clash_in_any_case(
    names: list[str], said: str, tmp_path: Path, caplog
) -> None:
    """On macOS and Windows, ``Clinic`` and ``clinic`` are one folder."""
    (tmp_path / "i").mkdir(), (tmp_path / "m").mkdir()
    argv = ["evaluate", "--checkpoint", "x.ckpt", "--split", "none"]
    for name in names:
        argv += ["--external", f"{name}={tmp_path / 'i'}:{tmp_path / 'm'}"]
    assert _run([*argv, "--output", str(tmp_path / "report")]) == 2
    assert said in re.sub(r"\s+", " ", caplog.text)
    assert not (tmp_path / "report").exists()
