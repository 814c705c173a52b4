"""The config contract: guide defaults, auto-derivations, shipped configs and clear errors."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from skinet.augment.checks import check_config
from skinet.config.data import ISIC2017_MEAN
from skinet.config.errors import ConfigError
from skinet.config.experiment import RESOLVED_KEY, ExperimentConfig, load_config, parse_config
from skinet.keys import HyperparamKey, MetricsKey

REPO = Path(__file__).resolve().parents[2]
SHIPPED = sorted((REPO / "configs").glob("*.yaml"))
EXPERIMENT_CONFIGS = [p for p in SHIPPED if not p.name.startswith("transforms_")]

# (section, dotted field, guide default) from the training guide's tables.
GUIDE_DEFAULTS = [
    ("train", "batch_size", 8),
    ("train", "prefetch_factor", None),
    ("train", "cache_in_ram", True),
    ("train", "use_torch_compile", False),
    ("train", "loss_name", "BCE_DICE"),
    ("train", "optimizer_name", "adamw"),
    ("train", "lr", 1e-4),
    ("train", "weight_decay", 1e-4),
    ("train", "optimal_threshold", None),
    ("train", "max_epochs", 1),
    ("train", "accelerator", "auto"),
    ("train", "deterministic", True),
    ("train", "seed", 42),
    ("train", "use_lr_scheduler", True),
    ("train", "scheduler_type", "reduce_on_plateau"),
    ("train", "cosine_annealing_config.eta_min", 1e-6),
    ("train", "lr_scheduler_config.patience", 5),
    ("train", "lr_scheduler_config.factor", 0.5),
    ("train", "lr_scheduler_config.mode", "max"),
    ("train", "early_stopping_config.patience", 5),
    ("train", "early_stopping_config.mode", "max"),
    ("train", "system_metrics_interval_sec", 5.0),
    ("model", "in_channels", 3),
    ("model", "out_channels_layer1", 16),
    ("model", "number_of_layers", 5),
    ("model", "num_output_classes", 1),
    ("model", "kernel", 3),
    ("model", "stride", 2),
    ("model", "encoder_residual_mode", "he2"),
    ("model", "merge_residual_mode", "he2"),
    ("model", "se_reduction", 16),
    ("model", "validate_forward", True),
    ("model", "debug_forward", False),
    ("data", "split_random_seed", 42),
    ("transform", "seed_value", None),
    ("sweep", "lr", [3e-4]),
    ("sweep", "weight_decay", [0.0]),
    ("sweep", "batch_size", [8]),
    ("sweep", "num_workers", [2]),
    ("sweep", "prefetch_factor", [4]),
    ("sweep", "scheduler_type", ["none"]),
    ("sweep", "monitor", "val_mean_dice_per_image"),
    ("sweep", "direction", "maximize"),
]


def _get(obj: object, dotted: str) -> object:
    for part in dotted.split("."):
        obj = getattr(obj, part)
    return obj


@pytest.mark.parametrize(("section", "field", "expected"), GUIDE_DEFAULTS)
def test_schema_defaults_match_the_guide(section: str, field: str, expected: object) -> None:
    cfg = ExperimentConfig()
    assert _get(getattr(cfg, section), field) == expected


def test_default_monitor_is_the_metrics_key_default() -> None:
    assert ExperimentConfig().sweep.monitor == MetricsKey.default_monitor()


def test_every_hyperparam_key_is_a_sweep_list() -> None:
    cfg = ExperimentConfig()
    for key in HyperparamKey:
        assert isinstance(getattr(cfg.sweep, key.value), list)


@pytest.mark.parametrize("path", EXPERIMENT_CONFIGS, ids=lambda p: p.name)
def test_shipped_configs_load(path: Path) -> None:
    cfg = load_config(path)
    assert cfg.train.early_stopping_config.monitor == cfg.sweep.monitor


def test_main_config_production_values() -> None:
    cfg = load_config(REPO / "configs" / "main_config.yaml")
    assert (cfg.model.encoder_residual_mode, cfg.model.merge_residual_mode) == (
        "classical",
        "attention_gate",
    )
    assert cfg.train.lr == 3e-4 and cfg.train.batch_size == 8
    assert cfg.train.optimal_threshold == 0.5
    assert cfg.train.early_stopping_config.patience == 30
    assert cfg.train.lr_scheduler_config.patience == 3
    assert cfg.sweep.monitor == "val_best_dice_at_threshold"
    assert cfg.data.split_random_seed == cfg.transform.seed_value == cfg.train.seed == 100
    assert cfg.train.use_torch_compile and cfg.train.torch_compile_backend == "eager"
    assert [len(getattr(cfg.sweep, k.value)) for k in HyperparamKey] == [1] * len(HyperparamKey)
    # The recipe of docs/results.md: the default dermoscopy augmentations, not the robust ones.
    assert (cfg.model.norm, cfg.data.color_constancy) == ("instance", "shades_of_gray")
    assert cfg.data.mean != ISIC2017_MEAN and cfg.train.channels_last is None
    default = load_config(REPO / "configs" / "transforms_dermoscopy.yaml").transform
    assert cfg.transform.train_transforms == default.train_transforms


def test_cpu_budget_is_the_production_recipe_at_128_px_for_15_minutes() -> None:
    main = load_config(REPO / "configs" / "main_config.yaml").to_yaml_dict()
    budget = load_config(REPO / "configs" / "cpu_budget.yaml").to_yaml_dict()
    differences = {
        (section, key): value
        for section, fields in budget.items()
        for key, value in fields.items()
        if main[section][key] != value
        and key not in ("precision", "pin_memory", "lr_scheduler_config")
    }  # precision and pin_memory follow the accelerator (auto in main_config); the plateau
    # settings are unused under cosine_budget
    assert differences == {
        ("TRAIN_CONFIG", "experiment_name"): "skinet_cpu_budget",
        ("TRAIN_CONFIG", "max_time"): "00:00:15:00",
        ("TRAIN_CONFIG", "scheduler_type"): "cosine_budget",
        ("TRAIN_CONFIG", "accelerator"): "cpu",
        ("TRAIN_CONFIG", "use_early_stopping"): False,
        ("TRAIN_CONFIG", "checkpoint_config"): {
            **main["TRAIN_CONFIG"]["checkpoint_config"],
            "select": "last",  # the last epoch's weights: the end of the anneal
        },
        ("DATA_CONFIG", "image_size"): 128,
        ("DATA_CONFIG", "progressive_resizing"): {"scale": 0.75, "fraction": 0.5},
        ("DATA_CONFIG", "test_fraction"): 0.0,
    }


def test_debug_config_has_data_roots() -> None:
    cfg = load_config(REPO / "configs" / "debug_main_config.yaml")
    assert cfg.data.azure_blob_mount_point == "/mnt/data/"
    assert cfg.data.local_data_root


def test_automatic_values_stay_as_written() -> None:
    """The config holds no machine's values: precision, pin_memory and num_workers stay
    ``None`` (resolved where the Trainer is built: ``tests/runtime/test_devices.py``)."""
    train = parse_config({"TRAIN_CONFIG": {"accelerator": "gpu"}}).train
    assert (train.precision, train.pin_memory, train.num_workers) == (None, None, None)
    dumped = parse_config({}).to_yaml_dict()["TRAIN_CONFIG"]
    assert (dumped["precision"], dumped["pin_memory"], dumped["num_workers"]) == (None, None, None)


def test_a_saved_resolved_section_is_dropped_on_load() -> None:
    raw = {"TRAIN_CONFIG": {"max_epochs": 2}, RESOLVED_KEY: {"num_workers": 16}}
    assert parse_config(raw).train.max_epochs == 2


def test_t_max_follows_max_epochs() -> None:
    cfg = parse_config({"TRAIN_CONFIG": {"max_epochs": 17}})
    assert cfg.train.cosine_annealing_config.T_max == 17
    fixed = parse_config(
        {"TRAIN_CONFIG": {"max_epochs": 17, "cosine_annealing_config": {"T_max": 4}}}
    )
    assert fixed.train.cosine_annealing_config.T_max == 4


def test_monitor_propagates_to_callback_sections() -> None:
    cfg = parse_config({"SWEEP_CONFIG": {"monitor": "val_loss", "direction": "minimize"}})
    for section in ("early_stopping_config", "checkpoint_config", "lr_scheduler_config"):
        sub = getattr(cfg.train, section)
        assert (sub.monitor, sub.mode) == ("val_loss", "min")


def test_mismatched_monitor_names_the_path() -> None:
    raw = {
        "TRAIN_CONFIG": {"checkpoint_config": {"monitor": "val_loss"}},
        "SWEEP_CONFIG": {"monitor": "val_best_dice_at_threshold"},
    }
    with pytest.raises(ValueError, match=r"TRAIN_CONFIG\.checkpoint_config\.monitor"):
        parse_config(raw)


def test_same_monitor_in_sub_section_is_accepted() -> None:
    raw = {"TRAIN_CONFIG": {"early_stopping_config": {"monitor": "val_mean_dice_per_image"}}}
    assert parse_config(raw).train.early_stopping_config.monitor == "val_mean_dice_per_image"


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ({"TRAIN_CONFIG": {"batch_sise": 8}}, r"TRAIN_CONFIG\.batch_sise: unknown key"),
        ({"TRAIN_CONFIG": {"batch_size": "eight"}}, r"TRAIN_CONFIG\.batch_size: .*'eight'"),
        ({"TRAIN_CONFIG": {"batch_size": 0}}, r"TRAIN_CONFIG\.batch_size: .*greater than 0"),
        (
            {"TRAIN_CONFIG": {"early_stopping_config": {"patience": "x"}}},
            r"TRAIN_CONFIG\.early_stopping_config\.patience",
        ),
        ({"MODEL_CONFIG": {"merge_residual_mode": "bogus"}}, r"MODEL_CONFIG\.merge_residual_mode"),
        ({"trainconfig": {"lr": -1}}, r"trainconfig\.lr"),
        ({"NOT_A_SECTION": {}}, r"NOT_A_SECTION: unknown key"),
        ({"SWEEP_CONFIG": {"monitor": "val_acc"}}, r"SWEEP_CONFIG\.monitor: .*unknown metric"),
        ({"TRAIN_CONFIG": {"max_epochs": [1]}}, r"max_epochs: .*integer \(got \[1\]\)"),
    ],
)
def test_bad_values_name_the_yaml_path(raw: dict, expected: str) -> None:
    with pytest.raises(ConfigError, match=expected):
        parse_config(raw)


@pytest.mark.parametrize("norm", ["batch", "instance"])
def test_too_small_an_image_size_advises_the_smallest_that_trains(norm: str) -> None:
    def parse(size: int) -> ExperimentConfig:
        model = {"number_of_layers": 5, "stride": 2, "norm": norm}
        return parse_config({"MODEL_CONFIG": model, "DATA_CONFIG": {"image_size": size}})

    with pytest.raises(ConfigError, match="too small") as error:
        parse(8)
    advice = re.search(r"use image_size >= (\d+)", str(error.value))
    assert advice, error.value
    advised = int(advice.group(1))
    assert parse(advised).data.image_size == advised
    with pytest.raises(ConfigError, match="too small"):
        parse(advised - 1)


@pytest.mark.parametrize("spelling", ["TRAIN_CONFIG", "trainconfig", "train_config"])
def test_section_name_spellings(spelling: str) -> None:
    assert parse_config({spelling: {"batch_size": 3}}).train.batch_size == 3


def test_load_config_reads_yaml_with_overrides_and_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump({"trainconfig": {"batch_size": 4}}))
    cfg = load_config(path, {"TRAIN_CONFIG.max_epochs": 3, "MODEL_CONFIG.kernel": 5})
    assert (cfg.train.batch_size, cfg.train.max_epochs, cfg.model.kernel) == (4, 3, 5)
    path.write_text("TRAIN_CONFIG: {lr: [}")
    with pytest.raises(ConfigError, match="c.yaml is not valid YAML"):
        load_config(path)
    with pytest.raises(ConfigError, match="config file not found"):
        load_config(tmp_path / "missing.yaml")


def test_resolved_config_round_trips() -> None:
    cfg = parse_config({"SWEEP_CONFIG": {"monitor": "val_best_dice_at_threshold"}})
    again = parse_config(cfg.to_yaml_dict())
    assert again == cfg


def test_an_unknown_section_lists_the_sections() -> None:
    with pytest.raises(ConfigError, match="FOO: unknown key \\(the sections are TRAIN_CONFIG, "):
        load_config(REPO / "configs" / "quickstart.yaml", {"FOO.bar": 1})


def test_augment_on_device_refuses_compose_kwargs_it_would_not_apply() -> None:
    raw = {"TRAIN_CONFIG": {"augment_on": "device"}, "TRANSFORM_CONFIG": {"train_transforms": []}}
    raw["TRANSFORM_CONFIG"]["compose_kwargs"] = {"p": 0.5}
    expected = "compose_kwargs .* is not applied with TRAIN_CONFIG.augment_on: device"
    with pytest.raises(ConfigError, match=expected):
        check_config(parse_config(raw))


def test_a_device_augmented_checkpoint_config_reads_without_albumentations(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import sys

    for name in [m for m in sys.modules if m.startswith(("albumentations", "skinet.augment"))]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "albumentations", None)  # the core install: not there
    raw = {
        "TRAIN_CONFIG": {"augment_on": "device"},
        "TRANSFORM_CONFIG": {"train_transforms": [{"name": "HorizontalFlip", "params": {}}]},
    }
    cfg = parse_config(raw, "checkpoint config")
    assert cfg.train.augment_on == "device"
    assert "skinet.augment.device_pipeline" not in sys.modules
