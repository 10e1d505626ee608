"""Issue 14, the rule-level parts: a port a maintainer would merge. Each test runs the
real engine with every rule on a file written the way research code is, and checks
what the patch changes, what it reports, and what the ported code does on this CPU."""

import subprocess
from textwrap import dedent

from porter.engine.process import Options, migrate_source
from porter.engine.registry import all_rules
from porter_test_utils import python_without_porter, run_porter

ALL = Options(rules=all_rules())


def port(source: str):
    return migrate_source(dedent(source).encode(), ALL)


def test_an_import_the_port_leaves_unused_is_removed():
    result = port("""\
        import sys
        import torch

        if not torch.cuda.is_available():
            sys.exit("this script needs a GPU")
        x = torch.zeros(2)
        """)
    assert result.new.decode() == dedent("""\
        import porter_runtime
        import torch

        porter_runtime.require_device("this script needs a GPU")
        x = torch.zeros(2)
        """)


def test_an_import_still_used_or_never_used_stays():
    result = port("""\
        import os
        import sys
        import torch

        if not torch.cuda.is_available():
            sys.exit("this script needs a GPU")
        print(sys.argv)
        """)
    # os was never used and sys still is: both stay. torch lost its one use to the
    # rewrite, and porter_runtime imports it: it goes, as flake8 would ask.
    assert result.new.decode().startswith("import porter_runtime\nimport os\nimport sys\n\nporter_runtime.require_device(")


def test_import_torch_stays_where_torch_is_still_read_and_goes_by_any_alias():
    still_read = port("""\
        import torch

        def f(x: "torch.Tensor"):
            torch.cuda.synchronize()
            return x
        """)
    assert "import torch\n" in still_read.new.decode() and "porter_runtime.synchronize()" in still_read.new.decode()
    aliased = port("import torch as th\n\nth.cuda.synchronize()\n")
    assert aliased.new.decode() == "import porter_runtime\n\nporter_runtime.synchronize()\n"


def test_a_node_rewritten_by_two_rules_is_reported_once():
    result = port("""\
        import torch

        scaler = torch.amp.GradScaler(device="cuda", enabled=True)
        """)
    assert "scaler = porter_runtime.GradScaler(enabled=True)" in result.new.decode()
    assert [(f.line, f.code) for f in result.findings] == [(3, "PT503")]


ALREADY_RIGHT = """\
    import torch
    import torch.distributed as dist

    if torch.cuda.is_available():
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.benchmark = True

    backend = "gloo" if not torch.cuda.is_available() else "nccl"
    dist.init_process_group(backend="nccl" if torch.cuda.is_available() else "gloo")


    def to_numpy(t):
        if t.device.type != "cpu":
            t = t.cpu()
        return t.numpy()


    def pick_device():
        if torch.cuda.is_available():
            name = "cuda"
        elif torch.backends.mps.is_available():
            name = "mps"
        else:
            name = "cpu"
        return torch.device("cuda" if name == "cuda" else "mps" if torch.backends.mps.is_available() else "cpu")
    """


def test_guards_right_on_every_device_are_left_alone_with_no_finding():
    result = port(ALREADY_RIGHT)
    assert result.new.decode() == dedent(ALREADY_RIGHT)
    assert result.findings == []


PORTED_TWICE = """\
    import torch

    torch.set_default_tensor_type(torch.cuda.FloatTensor)


    def setup(rank):
        if torch.cuda.is_available():
            torch.cuda.set_device(rank)
            return torch.device(f"cuda:{rank}")
        return torch.device("cpu")
    """


def test_a_second_migration_of_a_port_finds_nothing():
    first = port(PORTED_TWICE)
    assert first.findings and all(f.action == "rewrite" for f in first.findings), first.findings
    assert "if porter_runtime.is_accelerator_available():" in first.new.decode()
    assert "porter_runtime.set_default_tensor_type(torch.cuda.FloatTensor)" in first.new.decode()
    second = migrate_source(first.new, ALL)
    assert second.new == first.new and second.findings == []


def test_importing_a_ported_module_prints_nothing(tmp_path):
    (tmp_path / "trainer.py").write_text(dedent("""\
        import argparse

        import torch

        DEVICE = "cuda"
        parser = argparse.ArgumentParser()
        parser.add_argument("--device", default="cuda")


        def train(steps, device="cuda"):
            return torch.zeros(steps, device=device).device.type
        """))
    (tmp_path / "only_import.py").write_text("import trainer\n")
    (tmp_path / "main.py").write_text("import trainer\nprint(trainer.train(2), trainer.DEVICE)\n")
    assert run_porter("migrate", tmp_path, "--write", "-q").returncode == 0
    ported = (tmp_path / "trainer.py").read_text()
    assert 'def train(steps, device=porter_runtime.device_str()):' in ported

    env = {"PATH": "/usr/bin:/bin", "PYTHONDONTWRITEBYTECODE": "1"}
    imported = subprocess.run(python_without_porter("only_import.py"), cwd=tmp_path, env=env,
                              capture_output=True, text=True)
    assert imported.returncode == 0, imported.stderr
    assert (imported.stdout, imported.stderr) == ("", "")
    ran = subprocess.run(python_without_porter("main.py"), cwd=tmp_path, env=env, capture_output=True, text=True)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout == "cpu cpu\n"


def test_two_rules_changing_different_parts_of_one_call_are_both_reported():
    """TP701 ports the attention keyword and TP702 the device map of the same call:
    both changes are in the output, so both are reported."""
    result = port("""\
        from transformers import AutoModelForCausalLM

        m = AutoModelForCausalLM.from_pretrained(name, device_map="cuda", attn_implementation="flash_attention_2")
        """)
    text = result.new.decode()
    assert 'attn_implementation=porter_runtime.attn_implementation("flash_attention_2")' in text
    assert "device_map=str(porter_runtime.device())" in text
    assert sorted(f.code for f in result.findings) == ["TP701", "TP702"]
