"""Every fenced ``skinet ...`` / ``python main_run.py ...`` command of the docs and README, run.

Commands run as typed (shell quoting, ``*`` patterns and ``#`` comments as bash reads them),
each doc file in its own folder that holds ``configs/`` and a small synthetic ISIC 2017 copy in
``data/ISIC2017`` and ``data/synthetic_isic2017``. Commands that take ``--set`` get the overrides
of :data:`TINY` appended (tiny model, 32 px, one epoch, no MLflow), the documented way to shrink a
run. One tiny quickstart run, trained once, is in every folder's ``runs/`` for the commands that
need a checkpoint; commands of one file run in their order, so ``--resume last`` continues the
run before it.

The default suite runs every command that does not train (data, predict, evaluate, export,
config, info) and checks that every training command parses and its config resolves; at about
15 s per tiny run on a 2-core machine the ~25 training commands themselves run under ``-m slow``.

A command that cannot run here is marked in the doc, on the line before its fence, with
``<!-- doc-test: skip (reason) -->``; :data:`EXPECTED_SKIPPED` counts them, so neither a new
unmarked command nor a new skip goes unnoticed.
"""

from __future__ import annotations

import glob
import os
import re
import runpy
import shlex
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from skinet.cli.arguments import parse_overrides
from skinet.cli.main import build_parser, main
from skinet.config.experiment import load_config
from skinet.datasets.layouts import ISIC2017_FOLDERS
from skinet.runtime.allocator import OPT_OUT

REPO = Path(__file__).resolve().parents[2]
DOCS = sorted((REPO / "docs").glob("*.md")) + [REPO / "README.md"]
GUIDE_SCRIPTS = ("main_run.py", "optuna_sweep.py", "run_seeds.py")
SKIP_MARK = re.compile(r"<!--\s*doc-test:\s*skip\s*\((.+?)\)\s*-->")
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.DOTALL | re.MULTILINE)
COMMAND = re.compile(r"^(?:\.venv/bin/)?(?:skinet\s|python\s+[\w./-]+\.py\b)")
EXPECTED_SKIPPED = 90
"""Downloads (network), a benchmark, DDP, ONNX exports, Apple silicon, the recipe study, and
the commands that use a model trained by a training command (those train only under slow)."""

TINY = [
    "TRAIN_CONFIG.accelerator=cpu",
    "TRAIN_CONFIG.num_workers=0",
    "TRAIN_CONFIG.batch_size=4",
    "TRAIN_CONFIG.use_mlflow_logger=false",
    "TRAIN_CONFIG.use_torch_compile=false",
    "TRAIN_CONFIG.enable_progress_bar=false",
    "TRAIN_CONFIG.num_sanity_val_steps=0",
    "TRAIN_CONFIG.limit_train_batches=2",
    "TRAIN_CONFIG.limit_val_batches=1",
    "TRAIN_CONFIG.cache_in_ram=false",
    "MODEL_CONFIG.out_channels_layer1=8",
    "MODEL_CONFIG.number_of_layers=3",
    "DATA_CONFIG.image_size=32",
]
"""Overrides appended to every command that takes ``--set`` (after its own, so they win)."""
TRAINING = ("train", "sweep", "seeds", "ablation", "cv")


@dataclass(frozen=True)
class DocCommand:
    """One command of a fenced block: where it is written and the words bash would pass."""

    doc: str
    line: int
    words: tuple[str, ...]
    skip: str | None

    @property
    def id(self) -> str:
        return f"{self.doc}:{self.line}"


def extract_commands(path: Path) -> list[DocCommand]:
    """The ``skinet``/guide-script commands of every fenced block of one Markdown file."""
    text = path.read_text()
    commands = []
    for fence in FENCE.finditer(text):
        if fence.group(1) not in ("bash", "sh", "shell", "console", ""):
            continue
        before = text[: fence.start()].rstrip("\n").rsplit("\n", 1)[-1]
        mark = SKIP_MARK.search(before)
        start = text.count("\n", 0, fence.start()) + 2  # the first line inside the fence
        lines = fence.group(2).split("\n")
        index = 0
        while index < len(lines):
            first, joined = index, lines[index]
            while joined.endswith("\\") and index + 1 < len(lines):
                index += 1
                joined = joined[:-1] + " " + lines[index].strip()
            index += 1
            if COMMAND.match(joined.strip()):
                words = tuple(shlex.split(joined, comments=True))
                commands.append(
                    DocCommand(path.name, start + first, words, mark.group(1) if mark else None)
                )
    return commands


ALL = [command for doc in DOCS for command in extract_commands(doc)]


def _argv(command: DocCommand, cwd: Path) -> tuple[str | None, list[str]]:
    """(guide script or None, arguments) with ``*`` expanded and the tiny overrides appended."""
    words = list(command.words)
    program = Path(words.pop(0)).name
    script = None
    if program != "skinet":
        script = Path(words.pop(0)).name
        assert script in GUIDE_SCRIPTS, f"{command.id}: mark `{script}` with a doc-test skip"
    expanded: list[str] = []
    for word in words:
        matches = sorted(glob.glob(word, root_dir=cwd)) if "*" in word else []
        expanded += matches or [word]
    subcommand = {"main_run.py": "train", "optuna_sweep.py": "sweep", "run_seeds.py": "seeds"}.get(
        script or "", expanded[0] if expanded else ""
    )
    if subcommand in TRAINING or "--set" in expanded:
        epochs = "2" if "--resume" in expanded else "1"
        data_dir = str((cwd / "data" / "synthetic_isic2017").resolve())
        tiny = [*TINY, f"TRAIN_CONFIG.max_epochs={epochs}", "DATA_CONFIG.dataset=synthetic"]
        tiny.append(f"DATA_CONFIG.data_dir={data_dir}")
        for value in tiny:
            expanded += ["--set", value]
    return script, expanded


def _run(script: str | None, argv: list[str]) -> int:
    if script is None:
        try:
            return main(argv)
        except SystemExit as exit_:  # --version and --help exit through argparse
            return int(exit_.code or 0)
    saved, tuning = sys.argv, os.environ.get(OPT_OUT)
    sys.argv = [script, *argv]
    os.environ[OPT_OUT] = "0"  # the script would restart itself (exec) and replace pytest
    try:
        runpy.run_path(str(REPO / script), run_name="__main__")
    except SystemExit as exit_:
        return int(exit_.code or 0)
    finally:
        sys.argv = saved
        if tuning is None:
            os.environ.pop(OPT_OUT, None)
        else:
            os.environ[OPT_OUT] = tuning
    return 0


@pytest.fixture(scope="module")
def tiny_dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from skinet.datasets.synthetic import make_synthetic_dataset

    root = tmp_path_factory.mktemp("doc_data") / "synthetic"
    make_synthetic_dataset(root, num_train=8, num_val=4, num_test=4, image_size=48, seed=0)
    return root


@pytest.fixture(scope="module")
def shared_run(tmp_path_factory: pytest.TempPathFactory, tiny_dataset: Path) -> Path:
    """One tiny quickstart run, for the commands that read a checkpoint."""
    folder = tmp_path_factory.mktemp("doc_shared")
    _link_inputs(folder, tiny_dataset)
    command = DocCommand(
        "shared", 0, ("skinet", "train", "--config", "configs/quickstart.yaml"), None
    )
    _, argv = _argv(command, folder)
    cwd = Path.cwd()
    os.chdir(folder)
    try:
        assert main([*argv, "--no-visualize"]) == 0
    finally:
        os.chdir(cwd)
    (run,) = (folder / "runs").glob("quickstart_seed100_*")
    return run


def _link_inputs(folder: Path, dataset: Path) -> None:
    (folder / "configs").symlink_to(REPO / "configs")
    (folder / "data").mkdir()
    for name in ("ISIC2017", "synthetic_isic2017"):
        (folder / "data" / name).symlink_to(dataset)
    images, masks = (dataset / name for name in ISIC2017_FOLDERS["val"])
    shutil.copytree(images, folder / "photos")
    shutil.copytree(masks, folder / "ISIC-2017_Test_v2_Part1_GroundTruth")
    shutil.copy(next(images.glob("*.jpg")), folder / "ISIC_0000000.jpg")
    # own_data.md's clinic: a folder layout of X.jpg + X_mask.png
    for image_dir, mask_dir in ISIC2017_FOLDERS.values():
        for sub in ("images", "masks"):
            (folder / "clinic" / sub).mkdir(parents=True, exist_ok=True)
        for image in (dataset / image_dir).glob("*.jpg"):
            shutil.copy(image, folder / "clinic" / "images" / image.name)
            mask = dataset / mask_dir / f"{image.stem}_segmentation.png"
            shutil.copy(mask, folder / "clinic" / "masks" / f"{image.stem}_mask.png")
    # clinic.md's calibration and check sets: the same pairs, split in two.
    pairs = sorted((folder / "clinic" / "images").glob("*.jpg"))
    for index, image in enumerate(pairs):
        part = folder / "clinic" / ("calibrate" if index % 2 == 0 else "check")
        for sub in ("images", "masks"):
            (part / sub).mkdir(parents=True, exist_ok=True)
        shutil.copy(image, part / "images" / image.name)
        mask = folder / "clinic" / "masks" / f"{image.stem}_mask.png"
        shutil.copy(mask, part / "masks" / mask.name)


@pytest.fixture(scope="module")
def doc_folders(
    tmp_path_factory: pytest.TempPathFactory, tiny_dataset: Path, shared_run: Path
) -> dict[str, Path]:
    """A working folder per doc file, with the inputs and the shared run."""
    folders = {}
    for doc in DOCS:
        folder = tmp_path_factory.mktemp(f"doc_{doc.stem}")
        _link_inputs(folder, tiny_dataset)
        (folder / "runs").mkdir()
        shutil.copytree(shared_run, folder / "runs" / shared_run.name)
        folders[doc.name] = folder
    return folders


def test_skipped_examples_are_counted() -> None:
    skipped = [c for c in ALL if c.skip]
    assert len(skipped) == EXPECTED_SKIPPED, [f"{c.id} ({c.skip})" for c in skipped]
    assert len(ALL) - len(skipped) >= 20  # the extraction still finds the examples


def _is_training(command: DocCommand) -> bool:
    words = command.words
    if Path(words[0]).name != "skinet":
        return True  # the guide scripts train, sweep or run seeds
    return len(words) > 1 and words[1] in TRAINING


def _ids(command: object) -> str:
    return command.id if isinstance(command, DocCommand) else ""


RUNNABLE = [c for c in ALL if not c.skip and not _is_training(c)]
TRAINING_COMMANDS = [c for c in ALL if not c.skip and _is_training(c)]


@pytest.mark.parametrize("command", RUNNABLE, ids=_ids)
def test_doc_command_runs(
    command: DocCommand, doc_folders: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    cwd = doc_folders[command.doc]
    monkeypatch.chdir(cwd)
    script, argv = _argv(command, cwd)
    assert _run(script, argv) == 0, f"{command.id}: {shlex.join(command.words)}"


@pytest.mark.parametrize("command", TRAINING_COMMANDS, ids=_ids)
def test_doc_training_command_parses_and_resolves(
    command: DocCommand, tiny_dataset: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its flags parse and its config (with the doc's ``--set``) validates; ``slow`` trains it."""
    _link_inputs(tmp_path, tiny_dataset)
    monkeypatch.chdir(tmp_path)
    script, argv = _argv(command, tmp_path)
    subcommand = {"main_run.py": "train", "optuna_sweep.py": "sweep", "run_seeds.py": "seeds"}
    full = [subcommand[script], *argv] if script else argv
    args = build_parser().parse_args(full)
    load_config(args.config, parse_overrides(args.set or []))


@pytest.mark.process  # sweeps with workers and DDP start processes
@pytest.mark.slow
@pytest.mark.parametrize("command", TRAINING_COMMANDS, ids=_ids)
def test_doc_training_command_runs(
    command: DocCommand, doc_folders: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Commands of one file run in their order: ``--resume last`` continues the run before."""
    cwd = doc_folders[command.doc]
    monkeypatch.chdir(cwd)
    script, argv = _argv(command, cwd)
    assert _run(script, argv) == 0, f"{command.id}: {shlex.join(command.words)}"
