"""The model summary of a training run counts the network's FLOPs for one image (Lightning's own
counted none: ``Total FLOPs: 0``), on the screen and in MLflow's ``model_summary.txt``."""

from __future__ import annotations

import gc
import re
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml
from lightning.pytorch.utilities.model_summary.model_summary import get_human_readable_count
from mlflow.tracking import MlflowClient
from torch.utils.flop_counter import FlopCounterMode

from skinet.cli.main import main
from skinet.config import parse_config
from skinet.models import UNet2D
from skinet.training.callbacks import summary
from skinet.training.callbacks.summary import measuring_one_image
from skinet.training.lightning_model import LightningModel


def _flops_of_one_image(raw: dict[str, Any]) -> str:
    """The network's forward FLOPs for one image of the config's size, counted here."""
    cfg = parse_config(raw)
    network = UNet2D(**cfg.model.model_dump()).eval()
    size = cfg.data.image_size
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        network(torch.zeros(1, cfg.model.in_channels, size, size))
    return get_human_readable_count(counter.get_total_flops()).strip()


def test_a_compiled_run_prints_and_logs_the_flops_of_one_image(
    tiny_raw: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tiny_raw["TRAIN_CONFIG"].update(
        max_epochs=1, use_torch_compile=True, torch_compile_backend="eager"
    )
    config = tmp_path / "tiny.yaml"
    config.write_text(yaml.safe_dump(tiny_raw))
    assert main(["train", "--config", str(config), "--no-visualize"]) == 0
    out = capsys.readouterr().out
    expected = _flops_of_one_image(tiny_raw)
    assert expected != "0"
    assert f"FLOPs: {expected} for one image, forward" in out, out[-3000:]
    # The network's row shows the image it was measured on; the metrics' empty rows are left out.
    (row,) = [line for line in out.splitlines() if "UNet2D" in line]
    assert "[1, 3, 32, 32]" in row and expected in row, row
    assert "BinaryF1Score" not in out

    client = MlflowClient(f"sqlite:///{tmp_path / 'runs' / 'mlflow.db'}")
    (run,) = client.search_runs([e.experiment_id for e in client.search_experiments()])
    text = Path(client.download_artifacts(run.info.run_id, "model_summary.txt", str(tmp_path)))
    total = re.search(r"^(\S+ ?\S?)\s+Total Flops$", text.read_text(), re.MULTILINE)
    assert total is not None and total.group(1).strip() == expected, text.read_text()[-600:]


def test_a_run_in_double_precision_measures_its_flops_on_an_image_of_its_dtype(
    tiny_raw: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tiny_raw["TRAIN_CONFIG"].update(max_epochs=1, precision="64-true", use_mlflow_logger=False)
    config = tmp_path / "tiny.yaml"
    config.write_text(yaml.safe_dump(tiny_raw))
    assert main(["train", "--config", str(config), "--no-visualize"]) == 0
    out = capsys.readouterr().out
    assert f"FLOPs: {_flops_of_one_image(tiny_raw)} for one image, forward" in out, out[-3000:]


def test_a_fit_runs_one_measured_forward_for_the_screen_and_model_summary_txt(
    tiny_raw: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    measured: list[tuple[int, ...]] = []
    forward = UNet2D.forward

    def counting(self: UNet2D, images: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        if images.shape[0] == 1 and not images.any():  # the summary's blank image, no batch's
            measured.append(tuple(images.shape))
        return forward(self, images, *args, **kwargs)

    monkeypatch.setattr(UNet2D, "forward", counting)
    gc.collect()
    kept_before = len(list(summary._measures))  # modules other tests still hold
    tiny_raw["TRAIN_CONFIG"].update(max_epochs=1)
    config = tmp_path / "tiny.yaml"
    config.write_text(yaml.safe_dump(tiny_raw))
    assert main(["train", "--config", str(config), "--no-visualize"]) == 0
    assert measured == [(1, 3, 32, 32)]
    client = MlflowClient(f"sqlite:///{tmp_path / 'runs' / 'mlflow.db'}")
    (run,) = client.search_runs([e.experiment_id for e in client.search_experiments()])
    text = Path(client.download_artifacts(run.info.run_id, "model_summary.txt", str(tmp_path)))
    assert "model.encoder" in text.read_text()  # every layer, not only the printed depth
    gc.collect()
    assert len(list(summary._measures)) == kept_before  # no module kept alive by its measure


def test_the_summary_leaves_the_network_as_it_found_it_even_when_it_fails(
    tiny_raw: dict[str, Any],
) -> None:
    tiny_raw["TRAIN_CONFIG"].update(use_torch_compile=True, torch_compile_backend="eager")
    module = LightningModel(tiny_raw)
    compiled = module.model
    module.loss_fn.eval()  # a module in eval mode stays so; the rest in train mode
    with (
        pytest.raises(RuntimeError, match="a forward that failed"),
        measuring_one_image(module) as measured,
    ):
        assert measured
        assert module.model is compiled._orig_mod  # type: ignore[union-attr]
        assert tuple(module.example_input_array.shape) == (1, 3, 32, 32)  # type: ignore[union-attr]
        module.eval()  # as Lightning's summary does before its forward
        raise RuntimeError("a forward that failed")
    assert module.model is compiled
    assert module.example_input_array is None
    assert module.training and module.model.training and not module.loss_fn.training


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (FSDP)")
def test_a_sharded_network_is_not_run_for_the_summary(tiny_raw: dict[str, Any]) -> None:
    import lightning as L

    # FSDP holds a shard of the network on each process: a forward on the first process alone
    # would wait for the others at fit start.
    trainer = L.Trainer(strategy="fsdp", accelerator="gpu", devices=1, logger=False)
    module = LightningModel(tiny_raw)
    module.trainer = trainer
    network = module.model
    with measuring_one_image(module) as measured:
        assert not measured
        assert module.model is network and module.example_input_array is None


def test_a_network_replicated_by_ddp_is_measured(tiny_raw: dict[str, Any]) -> None:
    import lightning as L

    trainer = L.Trainer(strategy="ddp", accelerator="cpu", devices=1, logger=False)
    module = LightningModel(tiny_raw)
    module.trainer = trainer
    with measuring_one_image(module) as measured:
        assert measured and module.example_input_array is not None
