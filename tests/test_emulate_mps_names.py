"""``porter verify --emulate mps``: the code's own "mps" answers as on a Mac
(porter_runtime/tools/mps_names.py).

A repository that asks ``torch.backends.mps.is_available()`` itself, moves to "mps" by
name or calls ``torch.mps`` took the CPU's way under the emulation: its bf16 check
refused the emulated Mac (torchtune, blind round 7) and its Mac branch never ran, so a
float64 tensor a Mac refuses there passed. Each script is ported with ``porter migrate
--write`` and run through the real CLI; each test failed before the change.
"""

from test_verify import lines_of, port, verify, write_tree

TRAIN = """
    import sys

    import torch
    import torch.nn as nn


    def bf16_supported():
        \"\"\"As torchtune's verify_bf16_support: CUDA with bf16, or a Mac.\"\"\"
        cuda = torch.cuda.is_available() and torch.cuda.is_bf16_supported()
        return cuda or torch.backends.mps.is_available()


    def main():
        device = torch.device("cuda")
        model = nn.Linear(8, 4).to(device)
        x = torch.randn(2, 8, device=device)
        if "--bf16" in sys.argv:
            if not bf16_supported():
                raise RuntimeError("bf16 precision was requested but is not supported on this hardware")
            model = model.to(torch.bfloat16)
            x = x.to(torch.bfloat16)
        if "--mac-branch" in sys.argv and torch.backends.mps.is_available():
            assert torch.device("mps").type == "mps"  # the object is MPS's; what moves there is on the device
            model = model.to(torch.device("mps"))
            x = x.to("mps")
            torch.mps.synchronize()
            torch.mps.manual_seed(0)
            print("mps memory", torch.mps.current_allocated_memory() > 0)
            out = model(x)
            torch.mps.empty_cache()
            if "--f64" in sys.argv:
                scale = torch.ones(4, device="mps", dtype=torch.float64)
        print("out", model(x).float().sum().item())


    if __name__ == "__main__":
        main()
"""


def _tree(tmp_path):
    root = write_tree(tmp_path / "repo", {"train.py": TRAIN, "requirements.txt": "torch\n"})
    port(root)
    return root


def test_a_repositorys_own_mac_check_passes_and_its_mac_branch_runs_on_the_device(tmp_path):
    tree = _tree(tmp_path)
    code, data, _ = verify(tree, "--emulate", "mps", "--run", "python train.py --bf16")
    assert code == 0, data["run"]  # the emulated Mac is a Mac to the code's own check
    code, data, _ = verify(tree, "--emulate", "mps", "--run", "python train.py --mac-branch")
    assert code == 0, data["run"]
    assert "mps memory True" in data["run"]["output"]  # torch.mps answers; the model moved by name holds memory
    # the branch runs on the emulated device: what a Mac refuses there is refused
    code, data, _ = verify(tree, "--emulate", "mps", "--run", "python train.py --mac-branch --f64")
    assert code == 1
    assert "Cannot convert a MPS Tensor to float64 dtype" in data["run"]["error"]
    assert data["run"]["location"] == {"path": "train.py",
                                       "line": lines_of((tree / "train.py").read_text(), "torch.float64")}
    # without the emulation the branch is not taken: the CPU has no MPS
    assert verify(tree, "--run", "python train.py --mac-branch --f64")[0] == 0


LOADER = """
    import sys

    import torch
    from safetensors.torch import load_file, save_file


    def main():
        device = torch.device("cuda")
        dtype = torch.float64 if "--f64" in sys.argv else torch.bfloat16
        save_file({"w": torch.randn(3, 3).to(dtype)}, "ckpt.safetensors")
        weights = load_file("ckpt.safetensors", device=str(device))
        print("loaded", weights["w"].dtype, (weights["w"] @ weights["w"]).float().sum().item() != 0)


    if __name__ == "__main__":
        main()
"""


def test_safetensors_loads_onto_the_emulated_device_by_its_name(tmp_path):
    """flux (blind round 12): ``load_file(path, device=str(device))`` with the ported device
    got "cpu:0", the emulated device's name, which safetensors refuses ("device cpu:0 is
    invalid"): a failure no Mac has, where the name is "mps". Now it loads on the device,
    and what a Mac refuses there (float64) is refused."""
    root = write_tree(tmp_path / "repo", {"load.py": LOADER, "requirements.txt": "torch\nsafetensors\n"})
    port(root)
    code, data, _ = verify(root, "--emulate", "mps", "--run", "python load.py")
    assert code == 0, data["run"]
    assert "loaded torch.bfloat16 True" in data["run"]["output"]
    code, data, _ = verify(root, "--emulate", "mps", "--run", "python load.py --f64")
    assert code == 1 and "Cannot convert a MPS Tensor to float64 dtype" in data["run"]["error"]
