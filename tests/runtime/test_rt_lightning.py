"""porter_runtime.lightning_accelerator / lightning_strategy (TP403) on each machine:
on CUDA what the code wrote, elsewhere what Lightning accepts there."""
from __future__ import annotations

import pytest

import porter_runtime


class FSDPStrategy:  # Lightning's class is judged by its name: lightning is not installed here
    pass


class DDPStrategy:
    pass


def test_on_cuda_the_written_choices_are_kept(simulate):
    simulate("cuda")
    strategy = FSDPStrategy()
    assert porter_runtime.lightning_accelerator("cuda") == "cuda"
    assert porter_runtime.lightning_accelerator("gpu") == "gpu"
    assert porter_runtime.lightning_strategy(strategy) is strategy
    assert porter_runtime.lightning_strategy("deepspeed_stage_2") == "deepspeed_stage_2"


@pytest.mark.parametrize("kind, accelerator", [("mps", "mps"), ("cpu", "cpu")])
def test_off_cuda_lightning_gets_what_runs_here(simulate, kind, accelerator):
    simulate(kind)
    assert porter_runtime.lightning_accelerator("cuda") == accelerator
    assert porter_runtime.lightning_accelerator("GPU") == accelerator
    assert porter_runtime.lightning_accelerator("auto") == "auto"
    with pytest.warns(UserWarning, match="runs on CUDA only"):
        assert porter_runtime.lightning_strategy(FSDPStrategy()) == "auto"
    assert porter_runtime.lightning_strategy("deepspeed_stage_3") == "auto"
    ddp = DDPStrategy()
    assert porter_runtime.lightning_strategy(ddp) is ddp
    assert porter_runtime.lightning_strategy("ddp") == "ddp"


def test_under_the_mps_emulation_lightning_is_told_the_cpu(simulate, monkeypatch):
    """Lightning checks the real hardware for MPS; the emulated device lives on the CPU."""
    simulate("cpu")
    monkeypatch.setenv("PORTER_EMULATE", "mps")
    porter_runtime._reset()
    assert porter_runtime.device_type() == "mps"
    assert porter_runtime.lightning_accelerator("cuda") == "cpu"


def test_options_from_the_command_line_are_kept_on_cuda(simulate):
    """``Trainer.from_argparse_args(porter_runtime.lightning_args(args))`` (RWKV-LM's
    ``--accelerator gpu --strategy deepspeed_stage_2``): on CUDA, nothing changes."""
    import argparse

    simulate("cuda")
    args = argparse.Namespace(accelerator="gpu", strategy="deepspeed_stage_2", devices=1, gpus=1)
    assert porter_runtime.lightning_args(args) is args
    assert vars(args) == {"accelerator": "gpu", "strategy": "deepspeed_stage_2", "devices": 1, "gpus": 1}


@pytest.mark.parametrize("kind, accelerator", [("mps", "mps"), ("cpu", "cpu")])
def test_options_from_the_command_line_are_chosen_for_this_machine_off_cuda(simulate, kind, accelerator):
    """Off CUDA the namespace itself changes, so the script's own later test
    (``if "deepspeed" in args.strategy: trainer.strategy.config[...]``) sees what Lightning got."""
    import argparse

    simulate(kind)
    args = argparse.Namespace(accelerator="gpu", strategy="deepspeed_stage_2", devices=1, gpus=2, precision="bf16")
    with pytest.warns(UserWarning, match="runs on CUDA only"):
        assert porter_runtime.lightning_args(args) is args
    assert (args.accelerator, args.strategy, args.gpus, args.precision) == (accelerator, "auto", None, "bf16")
    plain = argparse.Namespace(accelerator="cpu", strategy="ddp")  # nothing CUDA asked: as it was
    assert vars(porter_runtime.lightning_args(plain)) == {"accelerator": "cpu", "strategy": "ddp"}


class _Config(dict):
    """Stands for an OmegaConf trainer config: a mapping the port must not change."""


@pytest.mark.parametrize("kind, accelerator", [("cuda", "gpu"), ("mps", "mps"), ("cpu", "cpu")])
def test_options_from_a_mapping_are_chosen_for_this_machine(simulate, kind, accelerator):
    """``pl.Trainer(logger=logger, **porter_runtime.lightning_options(config.trainer))``
    (S4's Hydra config, ``accelerator: gpu``): the mapping itself on CUDA, a copy elsewhere."""
    simulate(kind)
    config = _Config(accelerator="gpu", strategy="auto", devices=1, max_epochs=2, gpus=1)
    chosen = porter_runtime.lightning_options(config)
    assert config == {"accelerator": "gpu", "strategy": "auto", "devices": 1, "max_epochs": 2, "gpus": 1}
    if kind == "cuda":
        assert chosen is config
    else:
        assert chosen == {"accelerator": accelerator, "strategy": "auto", "devices": 1, "max_epochs": 2, "gpus": None}
    assert porter_runtime.lightning_options({"max_epochs": 1}) == {"max_epochs": 1}
