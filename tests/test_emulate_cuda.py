"""``--emulate cuda`` (porter/verify/emulate_cuda): a CUDA machine on this CPU, so that the
original and the port can be run side by side without a GPU. Each test runs real code in a
fresh interpreter whose ``sitecustomize`` starts the emulation, as verify's children do."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from porter.verify.emulate_cuda import write_site
from porter.verify.emulate_cuda.text import compare_text, numbers


def _run(tmp_path: Path, code: str, *args: str, timeout: int = 240) -> subprocess.CompletedProcess:
    site = write_site(tmp_path / "site")
    script = tmp_path / "script.py"
    script.write_text(textwrap.dedent(code))
    env = {**os.environ, "PYTHONPATH": site, "OMP_NUM_THREADS": "1"}
    env.pop("LOCAL_WORLD_SIZE", None)
    return subprocess.run([sys.executable, *args, str(script)], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=timeout, check=False)


def test_tensors_on_cuda_live_on_the_cpu_and_say_cuda(tmp_path):
    done = _run(tmp_path, """
        import io, torch
        assert torch.cuda.is_available() and torch.cuda.device_count() == 1
        assert torch.accelerator.current_accelerator() == torch.device("cuda", 0)
        x = torch.randn(3, device="cuda")
        assert x.device == torch.device("cuda", 0) and x.is_cuda and x.get_device() == 0
        assert "device='cuda:0'" in repr(x)
        y = x * 2 + 1                                 # an operator's result is on the device
        assert y.is_cuda and (y @ y).is_cuda and torch.zeros_like(y).is_cuda
        assert not torch.zeros_like(y, device="cpu").is_cuda
        host = y.cpu()                                # a host copy, not a view
        host += 1
        assert not host.is_cuda and not torch.equal(host, y.cpu())
        assert y.to("cpu").device.type == "cpu" and y.to("cuda") is y and y.cuda() is y
        try:
            y.numpy()
            raise SystemExit("numpy of a device tensor must fail as on CUDA")
        except TypeError as exc:
            assert "cuda:0 device type tensor to numpy" in str(exc)
        assert torch.device(0) == torch.device("cuda", 0)  # an index alone: the accelerator (accelerate's maps)
        assert torch.tensor([1, 2], device=0).is_cuda and torch.arange(3).to(torch.device("cuda:0")).is_cuda
        m = torch.nn.Linear(4, 2).cuda()
        out = m(torch.ones(1, 4).cuda())
        out.sum().backward()
        assert out.is_cuda and m.weight.is_cuda and m.weight.grad.is_cuda
        p = torch.ones(3).pin_memory()
        assert p.is_pinned() and not p.is_cuda and not torch.ones(3).is_pinned()
        # checkpoints: saved from cuda:0, loaded back there, or where map_location says
        buf = io.BytesIO(); torch.save({"w": m.weight}, buf)
        for where, cuda in ((None, True), ("cpu", False), (lambda s, loc: s.cuda(), True), ("cuda:0", True)):
            buf.seek(0)
            assert torch.load(buf, map_location=where)["w"].is_cuda == cuda, where
        print("ok")
    """)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "ok"


def test_random_numbers_on_the_device_have_their_own_generator(tmp_path):
    done = _run(tmp_path, """
        import torch
        torch.manual_seed(0)
        a, b = torch.randn(4), torch.randn(4, device="cuda")
        torch.manual_seed(0)
        b2 = torch.randn(4, device="cuda")             # the host draw did not move the device's stream
        assert torch.equal(b.cpu(), b2.cpu())
        torch.cuda.manual_seed(5)
        state = torch.cuda.get_rng_state()
        c = torch.nn.functional.dropout(torch.ones(8, device="cuda"), 0.5)
        torch.cuda.set_rng_state(state)
        assert torch.equal(c.cpu(), torch.nn.functional.dropout(torch.ones(8, device="cuda"), 0.5).cpu())
        g = torch.Generator(device="cuda"); g.manual_seed(3)
        assert g.device == torch.device("cuda", 0) and isinstance(g, torch.Generator)
        assert torch.rand(2, generator=g, device="cuda").is_cuda
        print("ok")
    """)
    assert done.returncode == 0, done.stderr[-3000:]


def test_autocast_scaler_streams_and_queries_answer_as_on_cuda(tmp_path):
    done = _run(tmp_path, """
        import torch
        from torch.cuda.amp import GradScaler, autocast
        m = torch.nn.Linear(4, 4).cuda()
        with autocast():
            assert m(torch.ones(2, 4, device="cuda")).dtype == torch.float16   # CUDA's autocast dtype
        with torch.autocast("cuda", dtype=torch.bfloat16):
            assert torch.is_autocast_enabled("cuda") and m(torch.ones(2, 4).cuda()).dtype == torch.bfloat16
        scaler = GradScaler()
        assert scaler.is_enabled()
        opt = torch.optim.SGD(m.parameters(), 0.1)
        scaler.scale(m(torch.ones(2, 4).cuda()).sum()).backward(); scaler.step(opt); scaler.update()
        assert scaler.get_scale() == 65536.0
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record(); s = torch.cuda.Stream()
        with torch.cuda.stream(s):
            torch.ones(2, device="cuda").record_stream(s)
        end.record(); torch.cuda.synchronize()
        assert start.elapsed_time(end) >= 0.0
        assert torch.cuda.get_device_capability() == (8, 0) and torch.cuda.is_bf16_supported()
        assert torch.cuda.memory_allocated() == 0 and torch.cuda.get_device_properties(0).total_memory > 0
        torch.cuda.set_device(0); torch.cuda.nvtx.range_push("x"); torch.cuda.nvtx.range_pop()
        with torch.cuda.device(0):
            assert torch.cuda.current_device() == 0
        print("ok")
    """)
    assert done.returncode == 0, done.stderr[-3000:]


def test_a_dataloader_pins_in_its_own_thread(tmp_path):
    done = _run(tmp_path, """
        import torch
        from torch.utils.data import DataLoader, TensorDataset
        loader = DataLoader(TensorDataset(torch.arange(8.0)), batch_size=4, pin_memory=True, num_workers=1)
        for (batch,) in loader:
            assert batch.is_pinned() and batch.cuda(non_blocking=True).is_cuda
        print("ok")
    """)
    assert done.returncode == 0, done.stderr[-3000:]


@pytest.mark.slow
def test_nccl_under_torchrun_is_carried_by_gloo(tmp_path):
    done = _run(tmp_path, """
        import os, torch, torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel as DDP
        dist.init_process_group("nccl")
        rank = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(rank)
        assert torch.cuda.device_count() == 2 and torch.cuda.current_device() == rank
        model = DDP(torch.nn.Linear(2, 1).cuda(), device_ids=[rank])
        model(torch.ones(3, 2, device="cuda")).sum().backward()
        t = torch.ones(1, device=f"cuda:{rank}") * (rank + 1)
        dist.all_reduce(t)
        assert t.item() == 3.0 and t.is_cuda
        dist.barrier(device_ids=[rank])
        dist.destroy_process_group()
        open(f"rank{rank}.done", "w").write("ok")    # a file each: two ranks' prints interleave
    """, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2")
    assert done.returncode == 0, done.stderr[-3000:]
    assert sorted(p.name for p in tmp_path.glob("rank*.done")) == ["rank0.done", "rank1.done"]


def test_numbers_printed_are_compared_without_timings_or_warnings():
    original = textwrap.dedent("""\
        train.py:75: FutureWarning: `torch.cuda.amp.autocast(args...)` is deprecated.
          with autocast():
        {"epoch": 1, "train_loss": 2.28, "epoch_time": 13.49}
        step 10 | loss 3.2 | dt 120.5ms | tok/s 1000
        2026-11-28 12:00:01 saved
    """)
    port = '{"epoch": 1, "train_loss": 2.28, "epoch_time": 2.0}\nstep 10 | loss 3.2 | dt 7.5ms | tok/s 9\n'
    assert [v for _, v in numbers(original)] == [1.0, 2.28, 10.0, 3.2]
    assert compare_text(original, port) == (0.0, "")
    worst, where = compare_text(original, port.replace("3.2", "3.3"))
    assert worst == pytest.approx(0.1 / 3.3) and where == "line 4: 3.2 against 3.3"


_TRAIN = '''\
import argparse
import torch
import torch.nn as nn

parser = argparse.ArgumentParser()
parser.add_argument("--out", default="ckpt.pt")
args = parser.parse_args()
torch.cuda.manual_seed(0)
torch.backends.cudnn.benchmark = True
model = nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Dropout(0.1), nn.Linear(16, 1)).cuda()
opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
scaler = torch.cuda.amp.GradScaler()
data = torch.randn(64, 8, device="cuda")
target = data.sum(-1, keepdim=True)
for step in range(3):
    with torch.cuda.amp.autocast(dtype=torch.float16):
        loss = nn.functional.mse_loss(model(data).float(), target)
    opt.zero_grad(set_to_none=True)
    scaler.scale(loss).backward()
    scaler.step(opt)
    scaler.update()
    torch.cuda.synchronize()
    print(f"step {step} loss {loss.item():.6f} mem {torch.cuda.max_memory_allocated() / 2**20:.1f}MiB")
torch.save({"model": model.state_dict(), "opt": opt.state_dict()}, args.out)
'''


def _verify_against(tmp_path: Path, edit=None) -> dict:
    import json

    original, port = tmp_path / "original", tmp_path / "port"
    for tree in (original, port):
        tree.mkdir()
        (tree / "train.py").write_text(_TRAIN)
    env = {**os.environ, "NO_COLOR": "1", "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-m", "porter", "migrate", str(port), "--write", "-q"], env=env,
                          capture_output=True, text=True, check=False)
    assert done.returncode in (0, 1), done.stderr
    assert "porter_runtime" in (port / "train.py").read_text()
    if edit:
        (port / "train.py").write_text(edit((port / "train.py").read_text()))
    done = subprocess.run([sys.executable, "-m", "porter", "verify", str(port), "--against", str(original),
                           "--emulate", "cuda", "--run", "python train.py", "--output-format", "json"],
                          env=env, capture_output=True, text=True, check=False, timeout=600)
    data = json.loads(done.stdout)
    assert data["run"]["status"] == "ok", data["run"]["output"]
    assert not list(original.glob("*.pt")), "the original tree is never written"
    assert not list(port.glob("*.pt")), "nor the port: CMD runs on copies, once each (the port's is verify's run)"
    return {"exit": done.returncode, **data["against"]}


@pytest.mark.slow
def test_verify_against_shows_the_port_computes_what_the_original_does_on_cuda(tmp_path):
    result = _verify_against(tmp_path)
    assert result["verdict"] == "identical", result
    assert result["exit"] == 0
    assert {row["what"] for row in result["compared"]} == {"printed numbers", "ckpt.pt"}


@pytest.mark.slow
def test_verify_against_catches_a_port_that_changes_cuda(tmp_path):
    # what a wrong rewrite would do: autocast dropped, and the model left on the host
    def wrong(text: str) -> str:
        assert "dtype=torch.float16" in text
        return text.replace("dtype=torch.float16", "enabled=False")
    result = _verify_against(tmp_path, wrong)
    assert result["verdict"] == "differs" and result["exit"] == 1
    worst = {row["what"]: row["difference"] for row in result["compared"]}
    assert worst["printed numbers"] > 0 and worst["ckpt.pt"] > 0
    assert result["spread"] == 0.0  # the original agrees with itself: the difference is the port's
