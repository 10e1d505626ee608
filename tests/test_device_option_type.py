"""PT007 on a real tree: the README's own command passes `--device "cuda"` to a demo that
has nothing else CUDA-like (Grounded-SAM's demos, round 11). Ported, the README's command
runs on this machine's device; the original stops where the string reaches `.to()`."""

import subprocess
from pathlib import Path

from porter_test_utils import python_without_porter, run_porter

DEMO = '''\
import argparse

import torch


def main():
    parser = argparse.ArgumentParser("demo")
    parser.add_argument("--box_threshold", type=float, default=0.3)
    parser.add_argument("--device", type=str, default="cpu", help="running on cpu only!, default=False")
    parser.add_argument("--mode", default="cuda_graphs")  # not a device: left as it is
    args = parser.parse_args()
    model = torch.nn.Linear(4, 2).to(args.device)
    x = torch.ones(3, 4, device=args.device)
    print(args.device, args.mode, model(x).shape[0])


if __name__ == "__main__":
    main()
'''
README = '''\
# Demo

```bash
python demo.py --box_threshold 0.35 --device "cuda"
```
'''


def _tree(root: Path) -> Path:
    root.mkdir()
    (root / "demo.py").write_text(DEMO)
    (root / "README.md").write_text(README)
    return root


def test_the_readmes_cuda_device_option_runs_ported(tmp_path):
    original = _tree(tmp_path / "original")
    command = ["demo.py", "--box_threshold", "0.35", "--device", "cuda"]
    before = subprocess.run(python_without_porter(*command), cwd=original, capture_output=True, text=True,
                            env={"CUDA_VISIBLE_DEVICES": "", "PATH": "/usr/bin:/bin"})
    assert before.returncode != 0  # the original needs CUDA for the README's command

    port = _tree(tmp_path / "port")
    proc = run_porter("migrate", port, "--write", "--no-progress", "-q")
    assert proc.returncode in (0, 1), proc.stderr
    text = (port / "demo.py").read_text()
    assert 'parser.add_argument("--device", type=porter_runtime.device_option, default="cpu"' in text
    assert 'parser.add_argument("--mode", default="cuda_graphs")' in text
    after = subprocess.run(python_without_porter(*command), cwd=port, capture_output=True, text=True,
                           env={"CUDA_VISIBLE_DEVICES": "", "PATH": "/usr/bin:/bin"})
    assert after.returncode == 0, after.stderr
    assert after.stdout.split() == ["cpu", "cuda_graphs", "3"]
    again = run_porter("migrate", port, "--check", "--no-progress", "-q")
    assert b"PT007" not in again.stdout
