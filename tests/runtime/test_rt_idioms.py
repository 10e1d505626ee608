"""Decision tests for porter_runtime's idiom helpers (require_device,
set_default_tensor_type, load_state_dict) and the device calls the PT9xx rewrites
make, on simulated CUDA, MPS and CPU machines."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import warnings
from collections import OrderedDict

import pytest
import torch
from torch import nn

import porter_runtime


# -- formatted and integer devices: the rewrites equal the originals on CUDA ----

@pytest.mark.parametrize("gpu", [0, 1, 3, "1"])
def test_formatted_device_strings_equal_the_original_on_cuda(simulate, gpu):
    simulate("cuda")
    for text in (f"cuda:{gpu}", "cuda:{}".format(gpu), "cuda:" + str(gpu)):
        assert porter_runtime.device(text) == torch.device(text)
        assert str(porter_runtime.device(text)) == text
        assert porter_runtime.map_location(text) == text  # torch.load gets the same argument


def test_percent_formatted_device_equals_the_original_on_cuda(simulate):
    simulate("cuda")
    assert porter_runtime.device("cuda:%d" % 2) == torch.device("cuda:2")


@pytest.mark.parametrize("kind", ["mps", "cpu"])
def test_formatted_device_strings_map_to_the_resolved_device(simulate, kind):
    simulate(kind)
    indexed = "mps:0" if kind == "mps" else kind  # an indexed request is the index a tensor there reports
    assert porter_runtime.device("cuda:{}".format(1)) == torch.device(indexed)
    assert str(porter_runtime.device(f"cuda:{0}")) == indexed
    location = porter_runtime.map_location(str(porter_runtime.device("cuda:0")))
    assert location == torch.device("cpu")  # MPS: load on the CPU first; CPU: the CPU


@pytest.mark.parametrize("index", [0, 1])
def test_integer_device_equals_to_index_on_cuda(simulate, index):
    simulate("cuda")
    # ``x.to(i)`` / ``.cuda(i)`` / ``torch.device(i)`` on a CUDA machine mean cuda:i
    assert porter_runtime.device(index) == torch.device("cuda", index)


def test_device_count_is_at_least_one_process_off_cuda(simulate):
    simulate("cpu")
    assert porter_runtime.device_count() == 1  # mp.spawn(nprocs=...) starts one process
    machine = simulate("cuda")
    machine.record(torch.cuda, "device_count", 4)
    assert porter_runtime.device_count() == 4


@pytest.mark.parametrize("kind", ["cpu", "mps"])
def test_off_cuda_each_process_of_a_local_launch_has_a_device(simulate, monkeypatch, kind):
    """yolov7's DDP: ``assert torch.cuda.device_count() > opt.local_rank`` on every rank of
    ``torch.distributed.launch --nproc_per_node 2``; ported, rank 1 died on a count of 1."""
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    monkeypatch.setenv("WORLD_SIZE", "2")
    simulate(kind)
    assert porter_runtime.device_count() == 2
    machine = simulate("cuda")
    machine.record(torch.cuda, "device_count", 8)
    assert porter_runtime.device_count() == 8  # CUDA's own count, launch or not


def test_off_cuda_each_process_of_a_spawned_group_has_a_device(tmp_path):
    """YOLOX's launch: ``mp.start_processes`` workers make a Gloo group, then
    ``assert num_gpus_per_machine <= device_count()``: a real 2-process group on this CPU."""
    script = tmp_path / "spawned.py"
    script.write_text(textwrap.dedent(f"""\
        import os
        import torch.distributed as dist
        import torch.multiprocessing as mp

        import porter_runtime


        def worker(rank):
            before = porter_runtime.device_count()
            dist.init_process_group("gloo", init_method="file://{tmp_path / 'rendezvous'}", world_size=2, rank=rank)
            print(rank, before, porter_runtime.device_count(), flush=True)
            dist.destroy_process_group()


        if __name__ == "__main__":
            mp.start_processes(worker, nprocs=2, start_method="spawn")
        """))
    env = {k: v for k, v in os.environ.items() if k not in ("WORLD_SIZE", "LOCAL_WORLD_SIZE", "RANK")}
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300,
                         env={**env, "PORTER_QUIET": "1", "CUDA_VISIBLE_DEVICES": ""})
    assert sorted(out.stdout.split("\n")[:2]) == ["0 1 2", "1 1 2"], out.stderr


# -- require_device --------------------------------------------------------------

def test_require_device_is_silent_on_cuda(simulate, monkeypatch, capsys):
    simulate("cuda")
    monkeypatch.delenv("PORTER_QUIET")
    porter_runtime.device()  # the usual info line, not part of this test
    capsys.readouterr()
    assert porter_runtime.require_device("needs a GPU") == torch.device("cuda")
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("kind", ["mps", "cpu"])
def test_require_device_is_satisfied_by_the_resolved_device(simulate, monkeypatch, capsys, kind):
    simulate(kind)
    monkeypatch.delenv("PORTER_QUIET")
    assert porter_runtime.require_device("needs a GPU") == torch.device(kind)
    err = capsys.readouterr().err
    assert "required CUDA (needs a GPU)" in err and f"runs on {kind}" in err


# -- set_default_tensor_type ------------------------------------------------------

@pytest.fixture
def restore_defaults():
    dtype = torch.get_default_dtype()
    yield
    torch.set_default_device(None)
    torch.set_default_dtype(dtype)


def test_set_default_tensor_type_forwards_on_cuda(simulate, restore_defaults):
    machine = simulate("cuda")
    seen = machine.record(torch, "set_default_tensor_type")
    porter_runtime.set_default_tensor_type(torch.cuda.FloatTensor)
    porter_runtime.set_default_tensor_type("torch.cuda.HalfTensor")
    assert seen.calls == [((torch.cuda.FloatTensor,), {}), (("torch.cuda.HalfTensor",), {})]


def test_cuda_tensor_type_becomes_dtype_and_device_on_cpu(simulate, restore_defaults):
    simulate("cpu")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        porter_runtime.set_default_tensor_type(torch.cuda.DoubleTensor)
        x = torch.zeros(2)
        assert x.dtype == torch.float64 and x.device.type == "cpu"
        porter_runtime.set_default_tensor_type(torch.FloatTensor)  # the usual reset
    assert torch.zeros(1).dtype == torch.float32
    assert torch.get_default_device() == torch.device("cpu")


def test_cuda_tensor_type_on_mps_sets_the_mps_device_and_float32(simulate, monkeypatch, restore_defaults):
    machine = simulate("mps")
    dtypes = machine.record(torch, "set_default_dtype")
    devices = machine.record(torch, "set_default_device")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        porter_runtime.set_default_tensor_type("torch.cuda.DoubleTensor")
    assert dtypes.calls == [((torch.float32,), {})]  # MPS has no float64 (one warning)
    assert devices.calls == [((torch.device("mps"),), {})]


# -- load_state_dict --------------------------------------------------------------

def _model() -> nn.Module:
    return nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.Linear(4, 2))


def _prefixed(model: nn.Module, prefix: str) -> OrderedDict:
    out = OrderedDict((prefix + k, v.clone() + 1) for k, v in model.state_dict().items())
    return out


@pytest.mark.parametrize("prefix", ["module.", "_orig_mod.", "_orig_mod.module.", "module._orig_mod."])
@pytest.mark.parametrize("kind", ["cuda", "mps", "cpu"])
def test_wrapped_checkpoint_loads_into_an_unwrapped_model(simulate, kind, prefix):
    simulate(kind)
    model = _model()
    sd = _prefixed(model, prefix)
    with pytest.raises(RuntimeError):
        model.load_state_dict(sd)  # what the original call does
    with pytest.warns(UserWarning, match="prefix removed"):
        result = porter_runtime.load_state_dict(model, sd)
    assert result.missing_keys == [] and result.unexpected_keys == []
    for name, value in model.state_dict().items():
        assert torch.equal(value, sd[prefix + name])


def test_ddp_checkpoint_with_metadata_keeps_batchnorm_versions(simulate):
    simulate("cpu")
    wrapped = nn.DataParallel(_model())
    sd = wrapped.state_dict()  # real module. keys and _metadata
    model = _model()
    with pytest.warns(UserWarning):
        porter_runtime.load_state_dict(model, sd, strict=True)
    assert "module.0.weight" in sd  # the caller's dict is not modified


def test_a_call_that_works_is_made_exactly_as_written(simulate):
    simulate("cpu")
    model = _model()
    calls = []
    original = model.load_state_dict
    model.load_state_dict = lambda *a, **k: calls.append((a, k)) or original(*a, **k)
    sd = _model().state_dict()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        porter_runtime.load_state_dict(model, sd, strict=False)
    assert calls == [((sd,), {"strict": False})]


class Wrapper(nn.Module):
    """Keys like DataParallel's, without touching CUDA."""

    def __init__(self, module: nn.Module) -> None:
        super().__init__()
        self.module = module


def test_a_wrapped_model_gets_the_plain_call(simulate):
    simulate("cuda")
    wrapped = Wrapper(_model())
    sd = _prefixed(wrapped.module, "module.")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        porter_runtime.load_state_dict(wrapped, sd)  # the original call succeeds


@pytest.mark.parametrize("change", ["extra", "missing", "partial-prefix", "shape"])
def test_failures_not_explained_by_a_prefix_raise_as_before(simulate, change):
    simulate("cpu")
    model = _model()
    sd = _prefixed(model, "module.")
    if change == "extra":
        sd["module.head.weight"] = torch.zeros(1)
    elif change == "missing":
        del sd["module.2.bias"]
    elif change == "partial-prefix":
        sd["2.bias"] = sd.pop("module.2.bias")
    else:
        sd["module.2.bias"] = torch.zeros(5)
    with pytest.raises(RuntimeError) as expected:
        model.load_state_dict(sd)
    with pytest.raises(RuntimeError) as got:
        porter_runtime.load_state_dict(model, sd)
    if change != "shape":  # a shape mismatch is reported after the prefix is removed
        assert str(got.value) == str(expected.value)


def test_strict_false_is_not_retried(simulate):
    simulate("cpu")
    model = _model()
    sd = _prefixed(model, "module.")
    result = porter_runtime.load_state_dict(model, sd, strict=False)
    assert result == model.load_state_dict(sd, strict=False)


def test_optimizer_and_other_objects_get_the_plain_call(simulate):
    simulate("cpu")
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    state = opt.state_dict()
    assert porter_runtime.load_state_dict(opt, state) is None

    class Thing:
        def load_state_dict(self, *args, **kwargs):
            raise RuntimeError("as before")

    with pytest.raises(RuntimeError, match="as before"):
        porter_runtime.load_state_dict(Thing(), {"module.x": 1})


def test_a_formatted_requirement_message_is_evaluated_only_off_cuda(simulate, monkeypatch, capsys):
    """The original evaluated an assert's f-string only on failure: on CUDA the
    callable message must not be called; elsewhere it is quoted, and a broken one
    (a NameError in the message) is dropped, not raised."""
    calls = []
    simulate("cuda")
    porter_runtime.require_device(lambda: calls.append("called") or "msg")
    assert calls == []
    simulate("cpu")
    monkeypatch.delenv("PORTER_QUIET")
    porter_runtime.require_device(lambda: undefined_name)  # noqa: F821
    assert "required CUDA; it runs on cpu" in capsys.readouterr().err
    simulate("mps")
    monkeypatch.delenv("PORTER_QUIET", raising=False)
    porter_runtime.require_device(lambda: "needs 8 GPUs")
    assert "required CUDA (needs 8 GPUs)" in capsys.readouterr().err


def test_a_legacy_cuda_type_kept_as_a_value_is_itself_on_cuda(simulate):
    simulate("cuda")
    assert porter_runtime.legacy_tensor_type(torch.cuda.FloatTensor) is torch.cuda.FloatTensor


@pytest.mark.parametrize("kind", ["cpu", "mps"])
def test_a_legacy_cuda_type_kept_as_a_value_builds_on_the_device_off_cuda(simulate, monkeypatch, kind):
    """SPADE's ``self.FloatTensor(bs, nc, h, w).zero_()`` and ``self.ByteTensor(t.size())``."""
    simulate(kind)
    if kind == "mps":  # no MPS here: the device the stand-in builds on is asked of the runtime
        import porter_runtime._device as device_module

        monkeypatch.setattr(device_module, "device", lambda *a, **k: torch.device("cpu"))
    floats = porter_runtime.legacy_tensor_type(torch.cuda.FloatTensor)
    bytes_ = porter_runtime.legacy_tensor_type(torch.cuda.ByteTensor)
    x = floats(2, 3, 4, 4).zero_()
    assert x.shape == (2, 3, 4, 4) and x.dtype == torch.float32 and torch.count_nonzero(x) == 0
    assert bytes_(x.size()).dtype == torch.uint8 and floats([1, 2]).tolist() == [1.0, 2.0]
    assert isinstance(x, floats) and not isinstance(x, bytes_) and not isinstance([1.0], floats)
    assert floats.__module__ == "torch.cuda" and floats.__name__ == "FloatTensor"
    assert porter_runtime.legacy_tensor_type(torch.FloatTensor) is torch.FloatTensor


def test_a_tensors_type_name_is_its_own_on_cuda(simulate, monkeypatch):
    simulate("cuda")
    x = torch.ones(2)
    assert porter_runtime.tensor_type(x) == "torch.FloatTensor"  # x.type() itself, a host tensor here


def test_a_tensor_on_the_device_is_named_as_cuda_names_it_off_cuda(simulate):
    """Megatron-LM's ``assert param.grad.type() == 'torch.cuda.FloatTensor'``."""
    simulate("cpu")
    assert porter_runtime.tensor_type(torch.ones(2)) == "torch.cuda.FloatTensor"
    assert porter_runtime.tensor_type(torch.ones(2, dtype=torch.bfloat16)) == "torch.cuda.BFloat16Tensor"
    assert porter_runtime.tensor_type(torch.ones(2, dtype=torch.int64)) == "torch.cuda.LongTensor"


# -- off_device (PT914): the move-once branch -------------------------------

class _Model(nn.Module):
    """LAVIS's BaseModel: ``device`` is the first parameter's."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(2, 2)

    @property
    def device(self) -> torch.device:
        return next(self.parameters()).device


def test_off_device_is_the_test_as_written_on_cuda(simulate):
    simulate("cuda")
    model = _Model()  # on the host; a CUDA device it is not on
    assert porter_runtime.off_device(model, torch.device("cuda:0")) is True
    assert porter_runtime.off_device(model, torch.device("cuda:0")) is True  # not moved: still off
    assert porter_runtime.off_device(model, torch.device("cpu")) is False  # where it is: as written, every time


@pytest.mark.parametrize("kind", ["cpu", "mps"])
def test_off_device_holds_once_for_a_model_met_on_the_device(simulate, kind):
    simulate(kind)
    model, other = _Model(), _Model()
    cpu = torch.device("cpu")
    assert porter_runtime.off_device(model, cpu) is True  # as on CUDA for a model built on the host
    assert porter_runtime.off_device(model, cpu) is False  # then as written
    assert porter_runtime.off_device(other, cpu) is True  # each object once
    assert porter_runtime.off_device(model, torch.device("meta")) is True  # elsewhere: as written
