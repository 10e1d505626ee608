"""Issue 27's new rewrites compute on a simulated CUDA machine what the original computed.

Each test runs the rule's own example, before and after, as code: PT907 with the CUDA
index a helper of another module returns (``rank, local_rank, device = dist.setup()``),
PT005 with a dataclass ``field(default="cuda")``. Devices cannot hold tensors here, so
the tensor factories record the device they were asked for.
"""
from __future__ import annotations

import dataclasses
import sys
import types

import pytest
import torch

device_flow = pytest.importorskip("porter.rules.device_flow")
device_option_default = pytest.importorskip("porter.rules.device_option_default")


def _example(rule, marker: str):
    return next(e for e in rule.invalid if marker in e.before)


def _module(name: str, code: str, monkeypatch) -> types.ModuleType:
    module = types.ModuleType(name)
    monkeypatch.setitem(sys.modules, name, module)  # a dataclass looks its module up
    exec(compile(code, f"{name}.py", "exec"), module.__dict__)
    return module


def _run_train(code: str, machine, monkeypatch, rank: int) -> torch.device:
    """``main`` of the PT907 example; the device its sampler's tensors were asked for."""
    example = _example(device_flow.CudaIndexFlow, "dist.setup()")
    machine.record(torch.distributed, "init_process_group")
    machine.record(torch.distributed, "get_rank", rank)
    machine.record(torch.cuda, "set_device")
    asked = machine.record(torch, "randn", lambda *shape, device=None: torch.zeros(shape))
    monkeypatch.setenv("LOCAL_RANK", str(rank))
    sources = dict(example.project)
    utils = _module("utils", "", monkeypatch)
    utils.dist = _module("utils.dist", sources["utils/dist.py"], monkeypatch)
    diffusion = _module("diffusion", "", monkeypatch)
    sampler = _module("diffusion.gaussian_diffusion", sources["diffusion/gaussian_diffusion.py"], monkeypatch)
    diffusion.create_diffusion = lambda steps: sampler.GaussianDiffusion()
    machine.record(torch, "tensor", lambda data, device=None: torch.as_tensor(data))
    main = _module("train", code, monkeypatch).main
    main(lambda img, t: img)
    return _as_cuda_torch_reads_it(asked.calls[0][1]["device"])


def _as_cuda_torch_reads_it(value) -> torch.device:
    """The device a CUDA build of torch makes of ``device=value``: an int ``i`` is ``cuda:i``
    (this CPU build would ask for an accelerator it lacks)."""
    return torch.device("cuda", value) if isinstance(value, int) else torch.device(value)


@pytest.mark.parametrize("rank", [0, 1, 3])
def test_a_returned_cuda_index_is_the_same_device_on_cuda(simulate, monkeypatch, rank):
    machine = simulate("cuda")  # two simulated GPUs
    example = _example(device_flow.CudaIndexFlow, "dist.setup()")
    original = _run_train(example.before, machine, monkeypatch, rank)
    ported = _run_train(example.after, machine, monkeypatch, rank)
    assert original == ported == torch.device("cuda", rank % 2)


@pytest.mark.parametrize("machine,expected", [("cuda", "cuda"), ("mps", "mps"), ("cpu", "cpu")])
def test_a_dataclass_field_default_keeps_cuda_and_resolves_elsewhere(simulate, monkeypatch, machine, expected):
    simulate(machine)
    example = _example(device_option_default.DeviceOptionDefault, "dc_field")
    original = _module("script_args", example.before, monkeypatch).ScriptArguments()
    ported = _module("script_args", example.after, monkeypatch).ScriptArguments()
    assert ported.device == expected and ported.optim == original.optim
    if machine == "cuda":
        assert dataclasses.astuple(ported) == dataclasses.astuple(original) == ("paged_adamw_32bit", "cuda")


fsdp_device = pytest.importorskip("porter.rules.fsdp_device")


@pytest.mark.parametrize("local_rank", [0, 1])
def test_fsdp_bound_in_a_partial_gets_the_same_device_on_cuda(simulate, monkeypatch, local_rank):
    machine = simulate("cuda")
    fsdp = pytest.importorskip("torch.distributed.fsdp")
    made = machine.record(fsdp, "FullyShardedDataParallel")
    example = _example(fsdp_device.FsdpDevice, "functools.partial")
    for code in (example.before, example.after):
        namespace = {"local_rank": local_rank}
        exec(compile(code, "wrap.py", "exec"), namespace)
        namespace["wrap"](torch.nn.Linear(2, 2))
    (_, original), (_, ported) = made.calls
    assert _as_cuda_torch_reads_it(original["device_id"]) == ported["device_id"] == torch.device("cuda", local_rank)
    assert original["sync_module_states"] is ported["sync_module_states"] is True


huggingface = pytest.importorskip("porter.rules.hf_device_map")


@pytest.mark.parametrize("local_rank", [0, 1])
def test_a_device_map_of_local_rank_is_the_same_device_on_cuda(simulate, monkeypatch, local_rank):
    machine = simulate("cuda")
    transformers = _module("transformers", "class AutoModelForCausalLM:\n    pass\n", monkeypatch)
    loaded = machine.record(transformers.AutoModelForCausalLM, "from_pretrained")
    monkeypatch.setenv("LOCAL_RANK", str(local_rank))
    example = _example(huggingface.HfDeviceMap, "LOCAL_RANK")
    for code in (example.before, example.after):
        _module("sft", code, monkeypatch).load("gpt2")
    (_, original), (_, ported) = loaded.calls
    assert _as_cuda_torch_reads_it(original["device_map"][""]) == ported["device_map"][""] \
        == torch.device("cuda", local_rank)


@pytest.mark.parametrize("local_rank", ["0", "1", ""])
def test_a_device_map_built_first_under_torchrun_is_the_same_device_on_cuda(simulate, monkeypatch, local_rank):
    # alpaca-lora: `{"": int(os.environ.get("LOCAL_RANK") or 0)}`, passed by name
    machine = simulate("cuda")
    transformers = _module("transformers", "class LlamaForCausalLM:\n    pass\n", monkeypatch)
    loaded = machine.record(transformers.LlamaForCausalLM, "from_pretrained")
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("LOCAL_RANK", local_rank)
    example = _example(huggingface.HfDeviceMap, "or 0")
    for code in (example.before, example.after):
        _module("finetune", code, monkeypatch).train("llama")
    (_, original), (_, ported) = loaded.calls
    assert _as_cuda_torch_reads_it(original["device_map"][""]) == ported["device_map"][""] \
        == torch.device("cuda", int(local_rank or 0))
