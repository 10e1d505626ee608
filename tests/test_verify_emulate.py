"""``porter verify --emulate mps``: a Mac in the loop, through the real CLI.

Small CUDA scripts are ported with ``porter migrate --write``, then run by ``porter verify
--emulate mps --run``: real torch on the CPU, with the vendored runtime answering as MPS
and checking each operator against MPS's contract. Each failure here passes without
``--emulate`` (it is Mac-only) and is located at the script's own line.
"""

import pytest
from test_verify import lines_of, port, verify, write_tree

TRAIN = """
    import os
    import sys

    import torch
    import torch.distributed as dist
    import torch.nn as nn


    def main():
        device = torch.device("cuda")
        model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1)).cuda()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        for step in range(2):
            x = torch.randn(4, 8).cuda()
            y = torch.randn(4, 1, device=device)
            loss = ((model(x) - y) ** 2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
        if "--f64" in sys.argv:
            noise = torch.full((4,), 0.5, dtype=torch.float64, device=device)
        if "--heaviside" in sys.argv:
            for _ in range(3):
                gate = torch.heaviside(x, torch.zeros_like(x))
        if "--pin" in sys.argv:  # pinning asked by a library (a Trainer's DataLoader), not ported
            settings = {"batch_size": 2}
            settings["pin_memory"] = True
            data = torch.utils.data.TensorDataset(torch.randn(4, 8))
            for (batch,) in torch.utils.data.DataLoader(data, **settings):
                model(batch.to(device))
        if "--gloo" in sys.argv:
            os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=sys.argv[-1])
            dist.init_process_group("gloo", rank=0, world_size=1)
            for p in model.parameters():
                dist.broadcast(p.data, src=0)
        print("loss", loss.item())


    if __name__ == "__main__":
        main()
"""


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    root = write_tree(tmp_path_factory.mktemp("emulate") / "repo", {"train.py": TRAIN, "requirements.txt": "torch\n"})
    port(root)
    return root


def _line(tree, needle):
    return lines_of((tree / "train.py").read_text(), needle)


def test_a_clean_training_loop_passes(tree):
    code, data, _ = verify(tree, "--emulate", "mps", "--run", "python train.py")
    assert code == 0, data["run"]
    assert data["emulate"]["started"] is True
    assert data["emulate"]["fallbacks"] == []
    assert "not its numerics or speed" in data["emulate"]["label"]


def test_a_dataloader_told_to_pin_runs_unpinned_as_on_a_mac(tree):
    """torch's DataLoader turns pin_memory off on MPS with a warning (facts §6); under the
    emulation it once tried to pin for the emulated accelerator and raised "Cannot access
    accelerator device" (alignment-handbook, blind round 5)."""
    code, data, _ = verify(tree, "--emulate", "mps", "--run", "python train.py --pin")
    assert code == 0, data["run"]
    assert "pin_memory' argument is set as true but not supported on MPS" in data["run"]["output"]


def test_float64_on_the_device_fails_at_its_line_and_is_named(tree):
    assert verify(tree, "--run", "python train.py --f64")[0] == 0  # on the CPU it works
    code, data, _ = verify(tree, "--emulate", "mps", "--run", "python train.py --f64")
    assert code == 1
    run = data["run"]
    assert "Cannot convert a MPS Tensor to float64 dtype" in run["error"]
    assert run["location"] == {"path": "train.py", "line": _line(tree, "torch.full(")}
    assert run["mapping"]["named"] and run["mapping"]["findings"][0]["code"] == "PT607"


def test_a_missing_mps_kernel_fails_at_its_line(tree):
    env = {"PYTORCH_ENABLE_MPS_FALLBACK": "0"}
    assert verify(tree, "--run", "python train.py --heaviside", env=env)[0] == 0
    code, data, _ = verify(tree, "--emulate", "mps", "--run", "python train.py --heaviside", env=env)
    assert code == 1
    run = data["run"]
    assert "NotImplementedError: The operator 'aten::heaviside' is not currently implemented for the MPS device" \
        in run["error"]
    assert run["location"] == {"path": "train.py", "line": _line(tree, "torch.heaviside(")}
    assert run["mapping"]["named"] and run["mapping"]["findings"][0]["code"] == "PT801"


def test_with_the_fallback_the_summary_lists_the_operators(tree):
    code, data, err = verify(tree, "--emulate", "mps", "--run", "python train.py --heaviside",
                             env={"PYTORCH_ENABLE_MPS_FALLBACK": "1"})
    assert code == 0, data["run"]
    assert data["emulate"]["fallbacks"] == [
        {"op": "aten::heaviside", "calls": 3, "first_at": f"train.py:{_line(tree, 'torch.heaviside(')}",
         "always": False}]
    # the runtime's own summary at exit, in the command's output
    assert "1 operator fell back to the CPU" in data["run"]["output"]


def test_a_gloo_collective_of_a_device_tensor_fails_at_its_line(tree):
    assert verify(tree, "--run", "python train.py --gloo 29611")[0] == 0
    code, data, _ = verify(tree, "--emulate", "mps", "--run", "python train.py --gloo 29612")
    assert code == 1
    run = data["run"]
    assert "ProcessGroupGloo::broadcast: invalid tensor type at index 0" in run["error"]
    assert "device=mps:0" in run["error"]
    assert run["location"] == {"path": "train.py", "line": _line(tree, "dist.broadcast(")}


def test_the_text_output_labels_the_emulation_and_lists_the_fallbacks(tree):
    import os
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-m", "porter", "verify", str(tree), "-j", "1", "-q", "--emulate", "mps",
                           "--run", "python train.py --heaviside"], capture_output=True, text=True,
                          env={**os.environ, "NO_COLOR": "1", "PYTORCH_ENABLE_MPS_FALLBACK": "1"})
    assert proc.returncode == 0, proc.stderr
    assert "emulating MPS on the CPU: checks MPS's rules, not its numerics or speed" in proc.stdout
    listed = next(line for line in proc.stdout.splitlines() if "aten::heaviside" in line)
    assert "3 calls" in listed and f"first at train.py:{_line(tree, 'torch.heaviside(')}" in listed


LOADER = """
    import torch
    from torch.utils.data import DataLoader, Dataset


    class Pairs(Dataset):
        def __init__(self, transform):
            self.transform = transform

        def __len__(self):
            return 4

        def __getitem__(self, i):
            return self.transform(torch.ones(2))


    def main():
        loader = DataLoader(Pairs(transform=lambda x: x * 2), batch_size=2, num_workers=1)
        for batch in loader:
            print(batch.cuda().sum().item())


    if __name__ == "__main__":
        main()
"""


def test_a_lambda_in_a_dataset_fails_with_spawn_as_on_macos(tmp_path):
    tree = write_tree(tmp_path / "repo", {"loader.py": LOADER, "requirements.txt": "torch\n"})
    port(tree)
    assert verify(tree, "--run", "python loader.py")[0] == 0  # Linux forks: nothing is pickled
    code, data, _ = verify(tree, "--emulate", "mps", "--run", "python loader.py")
    assert code == 1
    assert "Can't pickle local object 'main.<locals>.<lambda>'" in data["run"]["error"]


def test_without_the_runtime_the_emulation_says_it_never_started(tmp_path):
    tree = write_tree(tmp_path / "repo", {"plain.py": "print('no torch here')\n"})
    code, data, _ = verify(tree, "--emulate", "mps", "--run", "python plain.py")
    assert code == 0
    assert data["emulate"]["started"] is False


SCHEDULE = """
    import os
    import sys

    import torch
    import torch.distributed as dist
    import torch.nn as nn


    class Diffusion(nn.Module):
        def __init__(self, T=10):
            super().__init__()
            self.net = nn.Linear(4, 4)
            self.register_buffer("betas", torch.linspace(1e-4, 0.02, T).double())
            self.register_buffer("sqrt_alphas_bar", torch.sqrt(torch.cumprod(1.0 - self.betas, dim=0)))

        def forward(self, x, t):
            return self.net(x) * self.sqrt_alphas_bar[t].float()[:, None]


    def main():
        if "--ddp" in sys.argv:
            os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=sys.argv[-1])
            dist.init_process_group("nccl", rank=0, world_size=1)
        device = torch.device("cuda")
        model = Diffusion().to(device)
        if "--ddp" in sys.argv:
            model = nn.parallel.DistributedDataParallel(model, device_ids=[0])
        x = torch.randn(2, 4, device=device)
        t = torch.randint(10, (2,), device=device)
        print("out", model(x, t).sum().item())


    if __name__ == "__main__":
        main()
"""


@pytest.fixture(scope="module")
def schedule(tmp_path_factory):
    root = write_tree(tmp_path_factory.mktemp("schedule") / "repo",
                      {"diffusion.py": SCHEDULE, "requirements.txt": "torch\n"})
    port(root)
    return root


def test_a_float64_buffer_of_a_module_moved_to_the_device_runs(schedule):
    """pytorch-ddpm: `register_buffer("betas", ....double())`, then `.to(device)` raised
    'Cannot convert a MPS Tensor to float64' on a Mac; the port keeps the buffers float32
    there (porter_runtime.double) and float64 on CUDA."""
    assert "porter_runtime.double(torch.linspace(" in (schedule / "diffusion.py").read_text()
    code, data, _ = verify(schedule, "--emulate", "mps", "--run", "python diffusion.py")
    assert code == 0, data["run"]
    assert "out" in data["run"]["output"]


def test_ddp_in_a_one_process_group_runs_on_the_cpu_of_a_mac(schedule):
    """DiT / improved-diffusion / DINO under torchrun --nproc_per_node=1: Gloo can't
    broadcast MPS tensors, so the runtime resolves a Mac with a process group to the CPU."""
    code, data, _ = verify(schedule, "--emulate", "mps", "--run", "python diffusion.py --ddp 29621")
    assert code == 0, data["run"]
    assert "a process group" in data["run"]["output"]


EARLY = """
    import os
    import sys

    import torch
    import torch.distributed as dist

    DEVICE = torch.device("cuda")  # at import, before the group: edm's default arguments


    def main():
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=sys.argv[-1])
        dist.init_process_group("nccl", rank=0, world_size=1)
        if "--f64" in sys.argv:
            steps = torch.arange(4, dtype=torch.float64, device=DEVICE)
        total = torch.ones(2, device=DEVICE)
        dist.all_reduce(total)
        print("total", total.sum().item())


    if __name__ == "__main__":
        main()
"""


def test_a_device_kept_from_before_the_process_group_is_still_mps(tmp_path):
    """issue 44 / edm (blind round 5): a device resolved at import stays MPS on a Mac after
    the group moves the process to the CPU, so Gloo refuses what is made there and float64
    fails; the emulation once dropped the device when the process switched, and passed."""
    tree = write_tree(tmp_path / "repo", {"train.py": EARLY, "requirements.txt": "torch\n"})
    port(tree)
    assert verify(tree, "--run", "python train.py 29631")[0] == 0  # on the CPU it works
    code, data, _ = verify(tree, "--emulate", "mps", "--run", "python train.py 29632")
    assert code == 1
    assert "ProcessGroupGloo::allreduce: invalid tensor type" in data["run"]["error"]
    assert data["run"]["location"]["line"] == lines_of((tree / "train.py").read_text(), "dist.all_reduce(")
    code, data, _ = verify(tree, "--emulate", "mps", "--run", "python train.py --f64 29633")
    assert code == 1 and "Cannot convert a MPS Tensor to float64" in data["run"]["error"]


GAN = """
    import numpy as np
    import torch
    import torch.nn as nn
    from torch.autograd import Variable

    cuda = True if torch.cuda.is_available() else False
    Tensor = torch.cuda.FloatTensor if cuda else torch.FloatTensor

    generator = nn.Sequential(nn.Linear(8, 4), nn.Tanh())
    if cuda:
        generator.cuda()
    z = Variable(Tensor(np.random.normal(0, 1, (2, 8))))
    valid = Variable(Tensor(2, 1).fill_(1.0), requires_grad=False)
    print("gen", generator(z).shape, valid.sum().item())
"""


def test_a_flag_that_picks_legacy_cuda_types_keeps_a_mac_on_the_cpu(tmp_path):
    """PyTorch-GAN's dcgan: porter used to admit MPS in `cuda`, which then picked
    torch.cuda.FloatTensor on a Mac ('type torch.cuda.FloatTensor not available'); the
    flag is kept (PT202 reports it), so the script runs on the CPU there, as before."""
    tree = write_tree(tmp_path / "repo", {"dcgan.py": GAN, "requirements.txt": "torch\nnumpy\n"})
    port(tree)
    assert "cuda = True if torch.cuda.is_available() else False" in (tree / "dcgan.py").read_text()
    code, data, _ = verify(tree, "--emulate", "mps", "--run", "python dcgan.py")
    assert code == 0, data["run"]
    assert "gen" in data["run"]["output"]
