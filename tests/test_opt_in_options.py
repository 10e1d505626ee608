"""Code under an opt-in option that no command of the repository passes is for information.

PixArt-alpha's ``train_pixart_lora_hf.py`` (blind round 17), as diffusers' training scripts:
``if args.use_8bit_adam: import bitsandbytes as bnb`` with ``--use_8bit_adam`` a
``store_true`` option that neither the README nor a script passes. Those findings became
notes; where a command passes the option they need a human again. Through the real CLI,
then the ported script runs on the CPU as its README says.
"""

import json
import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner

from porter.cli.app import cli
from porter.project.flags import opt_in_options
from test_cli import make_tree

TRAIN = '''\
import argparse

import torch


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--use_8bit_adam", action="store_true", help="Whether or not to use 8-bit Adam.")
    parser.add_argument(
        "--enable_xformers_memory_efficient_attention", action="store_true", help="Use xformers."
    )
    parser.add_argument("--learning_rate", type=float, default=1e-3)
    parser.add_argument("--out", default="model.pt")
    args = parser.parse_args()
    model = torch.nn.Linear(4, 4).cuda()
    if args.enable_xformers_memory_efficient_attention:
        import xformers  # noqa: F401
    if args.use_8bit_adam and args.learning_rate > 0:
        import bitsandbytes as bnb

        optimizer_class = bnb.optim.AdamW8bit
    else:
        optimizer_class = torch.optim.AdamW
    optimizer = optimizer_class(model.parameters(), lr=args.learning_rate)
    loss = model(torch.randn(2, 4).cuda()).pow(2).mean()
    loss.backward()
    optimizer.step()
    torch.save(model.state_dict(), args.out)


if __name__ == "__main__":
    main()
'''
README = "Train: `accelerate launch train.py --enable_xformers_memory_efficient_attention --learning_rate 1e-3`\n"


def _findings(root: Path, tmp_path: Path) -> dict:
    report = tmp_path / "report.json"
    result = CliRunner().invoke(cli, ["migrate", str(root), "--write", "-j", "1", "--report", str(report)])
    assert result.exit_code in (0, 2), result.output
    data = json.loads(report.read_text())
    return {(f["code"], f["line"]): f for e in data["files"] for f in e.get("findings", ())}


def test_an_option_no_command_passes_makes_its_code_a_note_and_the_port_runs(tmp_path):
    root = make_tree(tmp_path / "repo", {"train.py": TRAIN, "README.md": README})
    found = _findings(root, tmp_path)
    bnb = [f for (code, line), f in found.items() if line == 19]
    assert bnb and all(f.get("severity") == "info" and "only with `--use_8bit_adam`" in f["message"] for f in bnb)
    xformers = [f for (code, line), f in found.items() if line == 17]  # the README passes this one
    assert xformers and all(f.get("severity") != "info" for f in xformers)
    run = subprocess.run([sys.executable, "train.py", "--learning_rate", "1e-3"], cwd=root, capture_output=True,
                         text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    assert (root / "model.pt").is_file()


def test_a_command_that_passes_the_option_keeps_the_finding(tmp_path):
    root = make_tree(tmp_path / "repo", {"train.py": TRAIN, "README.md": README,
                                          "scripts/train_8bit.sh": "python train.py --use_8bit_adam\n"})
    found = _findings(root, tmp_path)
    bnb = [f for (code, line), f in found.items() if line == 19]
    assert bnb and all(f.get("severity") != "info" for f in bnb)


def test_which_options_are_opt_in():
    sources = {"train.py": TRAIN.encode(),
               "other.py": b'p.add_argument("--use_8bit_adam", default=True, action="store_true")\n'
                           b'p.add_argument("--compile", action="store_true")\n'
                           b'p.add_argument("--offload", action="store_true", dest="cpu_offload")\n'
                           b'cfg.cpu_offload = True\n'}
    found = opt_in_options(sources, {"README.md": README.encode(), "configs/base.yaml": b"compile: false\n"})
    # --use_8bit_adam is on by default elsewhere; the README passes xformers; a config names `compile`;
    # cpu_offload is set True in code
    assert found == {}
    found = opt_in_options({"train.py": TRAIN.encode()}, {"README.md": b"python train.py\n"})
    assert found == {"use_8bit_adam": "--use_8bit_adam",
                     "enable_xformers_memory_efficient_attention": "--enable_xformers_memory_efficient_attention"}
