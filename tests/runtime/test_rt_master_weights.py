"""Float32 master weights where the runtime takes DeepSpeed out of a Hugging Face run.

Chinese-LLaMA-Alpaca (blind round 16): ``--torch_dtype float16 --deepspeed ds_zero2.json``
trains float16 parameters; DeepSpeed steps float32 copies of them on CUDA. Off CUDA the
runtime unsets ``deepspeed``, and AdamW on the float16 parameters turned them NaN at the
first step: the run exited 0 and the merged model sampled NaN.
"""
from __future__ import annotations

import sys
import types
from dataclasses import dataclass
from typing import Optional

import pytest
import torch

import porter_runtime
from porter_runtime import _master


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Embedding(50, 16), torch.nn.Linear(16, 50)).half()


def _train(model: torch.nn.Module, optimizer: torch.optim.Optimizer, steps: int = 3) -> list[float]:
    tokens = torch.randint(0, 50, (4, 8), generator=torch.Generator().manual_seed(1))
    losses = []
    for _ in range(steps):
        with torch.autocast("cpu", dtype=torch.bfloat16):  # what fp16=True becomes on the CPU
            logits = model(tokens)
        loss = torch.nn.functional.cross_entropy(logits.float().view(-1, 50), tokens.view(-1))
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        model.zero_grad()
        losses.append(loss.item())
    return losses


def test_adamw_on_float16_parameters_turns_them_nan_on_the_cpu():
    model = _model()  # the failure the master weights are for, on this torch
    _train(model, torch.optim.AdamW(model.parameters(), lr=1e-2))
    assert any(p.isnan().any() for p in model.parameters())


def test_float32_masters_train_float16_parameters_and_keep_their_dtype():
    model = _model()
    before = [p.detach().clone() for p in model.parameters()]
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    assert _master.keep_float32_master(optimizer) == 2 + 1  # embedding, linear weight and bias
    losses = _train(model, optimizer, steps=5)
    assert all(p.dtype == torch.float16 and torch.isfinite(p).all() for p in model.parameters())
    assert all(not torch.equal(a, b) for a, b in zip(before, model.parameters()))
    assert losses[-1] < losses[0]
    masters = [p for group in optimizer.param_groups for p in group["params"]]
    assert all(m.dtype == torch.float32 for m in masters)
    # the model holds each master's value, rounded to float16
    assert all(torch.equal(p, m.half()) for p, m in zip(model.parameters(), masters))
    assert {v.dtype for state in optimizer.state.values() for v in state.values() if v.dim()} == {torch.float32}


def test_float32_parameters_and_frozen_ones_are_left_alone():
    model = _model().float()
    model[0].half().weight.requires_grad_(False)
    optimizer = torch.optim.AdamW([p for p in model.parameters()], lr=1e-2)
    params = list(optimizer.param_groups[0]["params"])
    assert _master.keep_float32_master(optimizer) == 0
    assert optimizer.param_groups[0]["params"] == params
    assert _master.keep_float32_master(optimizer, dtypes=(torch.bfloat16,)) == 0


@dataclass
class _Args:
    deepspeed: Optional[str] = None
    use_cpu: bool = False

    def __post_init__(self):
        porter_runtime.training_arguments(self)


def _trainer_module(monkeypatch) -> type:
    """``transformers.trainer`` as a script that imported Trainer has it: its
    ``create_optimizer_and_scheduler`` builds torch's AdamW over the model, as Trainer does."""

    class Trainer:
        def __init__(self, model, args):
            self.model, self.args, self.optimizer = model, args, None

        def create_optimizer_and_scheduler(self, num_training_steps):
            self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=1e-2)
            self.lr_scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, lambda step: 1.0)

    module = types.ModuleType("transformers.trainer")
    module.Trainer = Trainer
    monkeypatch.setitem(sys.modules, "transformers.trainer", module)
    return Trainer


def test_trainer_steps_float32_masters_where_the_runtime_unset_deepspeed(simulate, monkeypatch):
    Trainer = _trainer_module(monkeypatch)
    original = Trainer.create_optimizer_and_scheduler
    simulate("cuda")
    trainer = Trainer(_model(), _Args(deepspeed="ds_zero2_no_offload.json"))
    assert Trainer.create_optimizer_and_scheduler is original  # CUDA: DeepSpeed runs, nothing is hooked
    trainer.create_optimizer_and_scheduler(3)
    assert {p.dtype for p in trainer.optimizer.param_groups[0]["params"]} == {torch.float16}

    simulate("cpu")
    with pytest.warns(UserWarning, match="deepspeed='ds_zero2_no_offload.json' is for CUDA GPUs"):
        args = _Args(deepspeed="ds_zero2_no_offload.json")
    assert args.deepspeed is None
    trainer = Trainer(_model(), args)
    with pytest.warns(UserWarning, match="3 trainable parameters are float16/bfloat16; the optimizer steps float32"):
        trainer.create_optimizer_and_scheduler(3)
    assert {p.dtype for p in trainer.optimizer.param_groups[0]["params"]} == {torch.float32}
    _train(trainer.model, trainer.optimizer)
    assert all(torch.isfinite(p).all() and p.dtype == torch.float16 for p in trainer.model.parameters())

    # a second Trainer made with arguments the runtime did not change keeps torch's optimizer
    plain = Trainer(_model(), _Args())
    plain.create_optimizer_and_scheduler(3)
    assert {p.dtype for p in plain.optimizer.param_groups[0]["params"]} == {torch.float16}
    _Args(deepspeed="zero3.json")  # hooked once, not twice
    assert not getattr(Trainer.create_optimizer_and_scheduler.__wrapped__, "_porter_master", False)
