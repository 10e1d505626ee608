"""porter_runtime.training_arguments_class: transformers' own TrainingArguments, filled by a
parser from the command line (TP709).

``Arguments`` below does in its ``__post_init__`` what transformers 4.5x's does with the
options this covers: it refuses ``tf32`` without CUDA ("--tf32 requires Ampere or a newer
GPU arch"), reads ``fsdp_config`` from the JSON file it names, strips the ``fsdp_`` prefix
of its keys, and, as accelerate's FSDP plugin does for ``sync_module_states``, refuses to
broadcast module states without a CUDA device. ``parse`` fills it the way HfArgumentParser
does: one flag per field, then ``cls(**values)``.
"""
from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import pickle
from typing import Optional

import pytest
import torch

import porter_runtime


@dataclasses.dataclass
class Arguments:
    output_dir: str = "out"
    tf32: Optional[bool] = None
    fsdp: str = ""
    fsdp_config: Optional[str] = None
    bf16: bool = False

    def __post_init__(self):
        if self.tf32 and not torch.cuda.is_available():
            raise ValueError("--tf32 requires Ampere or a newer GPU arch, cuda>=11 and torch>=1.7")
        if isinstance(self.fsdp_config, str):
            with open(self.fsdp_config, encoding="utf-8") as handle:
                self.fsdp_config = json.load(handle)
        config = dict(self.fsdp_config or {})
        for key in list(config):
            if key.startswith("fsdp_"):
                config[key[5:]] = config.pop(key)
        self.fsdp_config = config
        if self.fsdp and str(config.get("sync_module_states", "true")).lower() == "true" \
                and not torch.cuda.is_available():
            raise ValueError("There are currently no available devices found, must be one of 'XPU', 'CUDA', or 'NPU'.")

    def __str__(self):  # transformers prints its own, and the subclass keeps it
        return f"Arguments(output_dir={self.output_dir})"


def parse(cls, argv: list[str]):
    """What HfArgumentParser.parse_args_into_dataclasses does for one dataclass."""
    parser = argparse.ArgumentParser()
    for field in dataclasses.fields(cls):
        kind = bool if field.name in ("tf32", "bf16", "fp16", "fp16_full_eval", "bf16_full_eval") else str
        parser.add_argument(f"--{field.name}", type=(lambda v: v.lower() == "true") if kind is bool else str,
                            default=field.default)
    return cls(**vars(parser.parse_args(argv)))


@pytest.fixture
def fsdp_json(tmp_path):
    path = tmp_path / "fsdp_config.json"  # Liger-Kernel's examples/huggingface/config/fsdp_config.json
    path.write_text(json.dumps({"fsdp_sync_module_states": True, "fsdp_use_orig_params": True}))
    return str(path)


def test_on_cuda_the_class_itself(simulate, fsdp_json):
    simulate("cuda")
    assert porter_runtime.training_arguments_class(Arguments) is Arguments
    args = parse(porter_runtime.training_arguments_class(Arguments),
                 ["--tf32", "True", "--fsdp", "full_shard auto_wrap", "--fsdp_config", fsdp_json])
    assert type(args) is Arguments and args.tf32 is True
    assert args.fsdp_config == {"sync_module_states": True, "use_orig_params": True}


def test_without_cuda_the_parsed_options_pass_the_checks(simulate, fsdp_json, tmp_path):
    simulate("cpu")
    argv = ["--tf32", "True", "--fsdp", "full_shard auto_wrap", "--fsdp_config", fsdp_json]
    with pytest.raises(ValueError, match="tf32 requires Ampere"):
        parse(Arguments, argv)  # the original, off CUDA
    hooked = porter_runtime.training_arguments_class(Arguments)
    assert hooked is porter_runtime.training_arguments_class(Arguments)  # one class per class
    args = parse(hooked, argv)
    assert isinstance(args, Arguments) and type(args).__name__ == "Arguments"
    assert args.tf32 is None
    # the file's own key would have won over the runtime's after the prefix strip: it is the runtime's
    assert args.fsdp_config == {"use_orig_params": True, "sync_module_states": "false"}
    assert str(args) == "Arguments(output_dir=out)"
    # Trainer saves it with torch.save: it loads as transformers' class, where porter_runtime is not
    loaded = pickle.loads(pickle.dumps(args))
    assert type(loaded) is Arguments and loaded.fsdp_config == args.fsdp_config
    path = tmp_path / "training_args.bin"
    torch.save(args, path)
    assert type(torch.load(path, weights_only=False)) is Arguments
    assert type(copy.deepcopy(args)) is Arguments
    assert dataclasses.replace(args, output_dir="other").output_dir == "other"


def test_anything_else_is_returned_as_given(simulate):
    simulate("mps")
    assert porter_runtime.training_arguments_class(dict) is dict  # not a dataclass
    assert porter_runtime.training_arguments_class("TrainingArguments") == "TrainingArguments"


@dataclasses.dataclass
class HalfArguments:
    """transformers 4.37's fp16 check (it refuses fp16 without CUDA, NPU or XPU; bf16 passes on
    the CPU), and Firefly's own requirement that exactly one of the two is on."""
    output_dir: str = "out"
    fp16: bool = False
    bf16: bool = False
    fp16_full_eval: bool = False
    bf16_full_eval: bool = False

    def __post_init__(self):
        if (self.fp16 or self.fp16_full_eval) and not torch.cuda.is_available():
            raise ValueError("FP16 Mixed precision training with AMP or APEX (`--fp16`) and FP16 half precision "
                             "evaluation (`--fp16_full_eval`) can only be used on CUDA or NPU devices or certain "
                             "XPU devices (with IPEX).")
        assert sum([self.fp16, self.bf16]) == 1, "only one of fp16 and bf16 can be True"


@pytest.fixture
def transformers_437(tmp_path, monkeypatch):
    """An installed transformers whose training_args module holds 4.37's refusal (what the
    runtime reads), put first on the path."""
    package = tmp_path / "site" / "transformers"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "training_args.py").write_text(
        'MESSAGE = "FP16 Mixed precision training with AMP or APEX (`--fp16`) and FP16 half precision evaluation"\n')
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    for name in [m for m in __import__("sys").modules if m == "transformers" or m.startswith("transformers.")]:
        monkeypatch.delitem(__import__("sys").modules, name)
    from porter_runtime.thirdparty import huggingface
    monkeypatch.setattr(huggingface, "_FP16_REFUSED", None)
    return huggingface


def test_fp16_that_transformers_refuses_off_cuda_becomes_bf16_on_the_cpu(simulate, transformers_437):
    """Firefly's configs set fp16 and its train.py asserts one of fp16 and bf16: a silent blocker
    of round 14 (transformers 4.37 refuses fp16 on the CPU). On CUDA the class is left as it is."""
    simulate("cpu")
    with pytest.raises(ValueError, match="FP16 Mixed precision"):
        parse(HalfArguments, ["--fp16", "True"])  # the original, off CUDA
    args = parse(porter_runtime.training_arguments_class(HalfArguments), ["--fp16", "True"])
    assert (args.fp16, args.bf16) == (False, True)
    simulate("cuda")
    assert porter_runtime.training_arguments_class(HalfArguments) is HalfArguments


def test_fp16_stays_where_transformers_takes_it(simulate, transformers_437, monkeypatch):
    """A transformers without the refusal (4.4x on) keeps fp16 on the CPU."""
    simulate("cpu")
    monkeypatch.setattr(transformers_437, "_FP16_REFUSED", False)
    args = HalfArguments.__new__(porter_runtime.training_arguments_class(HalfArguments))
    args.fp16, args.bf16, args.fp16_full_eval, args.bf16_full_eval = True, False, False, False
    porter_runtime.training_arguments(args)
    assert (args.fp16, args.bf16) == (True, False)
