"""CUDA tooling outside torch: `nvidia-smi` run as a process, kernels fetched from the Hub."""

from __future__ import annotations

import re
from typing import Optional

import libcst as cst

from porter.rulebase.evidence import String
from porter.rulebase.rule import Example, Needs, Rule, Safety, string_value

#: The calls that run a command: the command is their first argument.
_RUNS = frozenset({"subprocess.run", "subprocess.call", "subprocess.check_call", "subprocess.check_output",
                   "subprocess.Popen", "subprocess.getoutput", "subprocess.getstatusoutput",
                   "os.system", "os.popen"})
_NVIDIA_SMI = re.compile(r"^\s*(?:\S*/)?nvidia-smi(?:\s|$)")


def _command_name(node: cst.BaseExpression) -> Optional[str]:
    """The command string, or a list's / tuple's first element when it is a string."""
    if isinstance(node, (cst.List, cst.Tuple)) and node.elements:
        node = node.elements[0].value
    return string_value(node)


class NvidiaSmi(Rule):
    """`subprocess.run(["nvidia-smi", ...])` and `os.system("nvidia-smi")` are reported.

    What:
    Reports a call of `subprocess.run` / `call` / `check_call` / `check_output` /
    `Popen` / `getoutput`, `os.system` or `os.popen` whose command (a string, or a
    list's first element) is `nvidia-smi`.

    Why:
    `nvidia-smi` ships with the NVIDIA driver. On a Mac or a CPU machine there is no
    such program: `subprocess.run([...])` raises `FileNotFoundError`, `os.system`
    returns 127, and code that parses its output (free memory, GPU names) reads nothing.

    Fix safety:
    Review (no rewrite). Skipping the call, or asking torch instead, changes what the
    run prints or decides; which one the author meant is theirs to say.

    Known limits:
    A command built elsewhere (`cmd = "nvidia-smi"; subprocess.run(cmd)`) or run
    through a shell script is not followed.
    """

    code = "PT111"
    name = "nvidia-smi"
    safety = Safety.REVIEW
    needs = Needs(targets=_RUNS, calls_only=True, evidence=String(pattern=_NVIDIA_SMI, word="nvidia"))

    valid = [
        "import subprocess\nsubprocess.run(['git', 'rev-parse', 'HEAD'])\n",
        "import subprocess\nprint('see nvidia-smi for details')\n",
        "def run(subprocess):\n    subprocess.run(['nvidia-smi'])\n",
    ]
    invalid = [
        Example("import subprocess\n\n\ndef gpu_report():\n    subprocess.run(['nvidia-smi'], check=True)\n"),
        Example("import os\nos.system('nvidia-smi --query-gpu=memory.used --format=csv')\n"),
        Example("from subprocess import check_output\n"
                "free = check_output(['nvidia-smi', '--query-gpu=memory.free', '--format=csv,nounits,noheader'])\n"),
    ]

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        target = self.matches(original.func)
        if target is None or not original.args or original.args[0].keyword is not None:
            return updated
        command = _command_name(original.args[0].value)
        if command is None or not _NVIDIA_SMI.search(command):
            return updated
        self.flag(original, f"`{target}` runs `nvidia-smi`, which comes with the NVIDIA driver: without CUDA "
                            "there is no such program (FileNotFoundError, or exit status 127 from a shell)",
                  suggestion="run it only where it exists (`if shutil.which('nvidia-smi'):`), and ask torch "
                             "off CUDA: `porter_runtime.device_name()`, `porter_runtime.mem_get_info()`")
        return updated


class HubKernel(Rule):
    """`kernels.get_kernel("org/name")` (a compiled kernel from the Hugging Face Hub) is reported.

    What:
    Reports calls of `kernels.get_kernel`, `kernels.load_kernel` and
    `kernels.get_locked_kernel`, naming the Hub repository when it is a literal.

    Why:
    `get_kernel` downloads the build of the kernel for this machine's torch, OS and
    backend. Most Hub kernels (the flash-attention ones, `flash-attn3` above all,
    which needs a Hopper GPU) publish CUDA builds only: on a Mac or a CPU machine the
    call raises because there is no build to fetch, and a CUDA kernel could not run
    on MPS or the CPU anyway.

    Fix safety:
    Review (no rewrite). Some kernels do publish Metal builds; whether this one does,
    and what the code should run without it, is the author's call.

    Known limits:
    `kernelize(model, ...)` and `LayerRepository` mappings are not reported: they
    keep the model's own PyTorch layers where no kernel fits.
    """

    code = "TP607"
    name = "hub-kernel"
    safety = Safety.REVIEW
    needs = Needs(targets=frozenset({"kernels.get_kernel", "kernels.load_kernel", "kernels.get_locked_kernel"}),
                  calls_only=True)

    valid = [
        "def get_kernel(name):\n    return name\nk = get_kernel('kernels-community/activation')\n",
        "import kernels\nok = kernels.has_kernel('kernels-community/flash-attn3')\n",
    ]
    invalid = [
        Example("from kernels import get_kernel\n\nflash_attn = get_kernel('kernels-community/flash-attn3')\n"),
        Example("import kernels\nactivation = kernels.get_kernel('kernels-community/activation', revision='v0.1.0')\n"),
    ]

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        target = self.matches(original.func)
        if target is None:
            return updated
        repo = string_value(original.args[0].value) if original.args else None
        what = f"`{repo}`" if repo else "the kernel"
        attention = repo is not None and "attn" in repo
        fallback = ("`torch.nn.functional.scaled_dot_product_attention`" if attention
                    else "the model's own PyTorch layer")
        self.flag(original, f"`{target}` downloads a compiled build of {what} for this machine; Hub kernels "
                            "are mostly CUDA-only, so without CUDA there is no build to fetch and the call raises",
                  suggestion=f"fetch it only on CUDA (`... if porter_runtime.is_cuda() else None`) and "
                             f"use {fallback} where it is None")
        return updated
