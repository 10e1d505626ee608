"""`pynvml.nvmlInit()` outside a `try` (TP606): it fails where there is no NVIDIA driver."""

from __future__ import annotations

import libcst as cst

from porter.rulebase.families.thirdparty.uses import GuardTracker, example_code
from porter.rulebase.rule import Example, Needs, Rule, Safety

_NVML_INIT = frozenset({"pynvml.nvmlInit", "pynvml.smi.nvidia_smi.getInstance", "nvidia_smi.nvmlInit"})


class NvmlInit(GuardTracker, Rule):
    """`pynvml.nvmlInit()` outside a `try` is reported: it fails where there is no NVIDIA driver.

    What:
    Reports calls of `pynvml.nvmlInit()` (however imported; also the `nvidia_smi`
    module of nvidia-ml-py3) that no `try` around them catches.

    Why:
    pynvml / nvidia-ml-py are pure Python and install anywhere, so the requirement
    is fine on a Mac; the call then raises `NVMLError_LibraryNotFound` because there
    is no NVIDIA driver. GPU monitoring code (memory, utilisation, temperature logs)
    stops the program with it.

    Fix safety:
    Review only: the monitoring must be skipped off CUDA, or read from
    `porter_runtime.memory_allocated()` / `mem_get_info()`.

    Known limits:
    The other NVML calls are not reported: they only run after `nvmlInit()`.
    """

    code = "TP606"
    name = "nvml-init"
    safety = Safety.REVIEW
    needs = Needs(calls_only=True, targets=_NVML_INIT)

    valid = [
        "import pynvml\ntry:\n    pynvml.nvmlInit()\nexcept pynvml.NVMLError:\n    pynvml = None\n",
        "def f(pynvml):\n    pynvml.nvmlInit()\n",
        "from mylib import nvmlInit\nnvmlInit()\n",
    ]
    invalid = [
        Example(example_code("""
            import pynvml

            def gpu_memory_gb(index=0):
                pynvml.nvmlInit()
                handle = pynvml.nvmlDeviceGetHandleByIndex(index)
                return pynvml.nvmlDeviceGetMemoryInfo(handle).used / 2**30
            """)),
        Example("from pynvml import nvmlInit as init\ninit()\n"),
    ]

    def visit_Try(self, node: cst.Try) -> None:
        self._stacks()[0].append(bool(node.handlers))  # any handler: NVMLError is no ImportError

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        if self.matches(original.func) is None or self.guarded():
            return updated
        self.flag(original, "NVML needs the NVIDIA driver: nvmlInit() raises NVMLError_LibraryNotFound "
                  "off CUDA (the pynvml package itself installs everywhere)",
                  suggestion="wrap the GPU monitoring in `if porter_runtime.device_type() == \"cuda\":` "
                  "(or try/except pynvml.NVMLError), or use porter_runtime.memory_allocated()")
        return updated
