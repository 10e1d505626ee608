"""`cuda=True` handed to a library: the library's own switch for running on CUDA."""

from __future__ import annotations

import libcst as cst

from porter.rulebase.evidence import Keyword
from porter.rulebase.rule import Example, Needs, Rule, Safety
from porter.rulebase.syntax import is_true, replace_arg

#: Keywords that, set to True, ask the callee to put its work on CUDA.
_FLAGS = frozenset({"cuda", "use_cuda"})


class CudaFlagKeyword(Rule):
    """`f(..., cuda=True)` becomes `f(..., cuda=porter_runtime.is_cuda())`.

    What:
    Rewrites the literal `True` passed as `cuda=` or `use_cuda=` to any call
    (`torch_fidelity.calculate_metrics(..., cuda=True)`, a metrics or rendering
    library's switch) into `porter_runtime.is_cuda()`.

    Why:
    A library told `cuda=True` moves its models and tensors with `.cuda()` itself:
    `torch_fidelity.calculate_metrics(..., cuda=True)` raises
    `AssertionError: Torch not compiled with CUDA enabled` on a Mac, far from any
    line porter could rewrite inside the library.

    Fix safety:
    Safe. `porter_runtime.is_cuda()` is True exactly where the runtime resolved to
    CUDA, so on CUDA the callee gets the same `True`; elsewhere it gets `False` and
    runs on the CPU (such switches only choose CUDA or the CPU).

    Known limits:
    A value other than the literal `True` (`cuda=args.cuda`) is left alone, as is
    the flag under a dict key (`kwargs = {"cuda": True}`).
    """

    code = "PT909"
    name = "cuda-flag-keyword"
    safety = Safety.SAFE
    needs = Needs(evidence=Keyword(_FLAGS))

    valid = [
        "import torch_fidelity\nm = torch_fidelity.calculate_metrics(input1=a, input2=b, cuda=False)\n",
        "import torch_fidelity\nm = torch_fidelity.calculate_metrics(input1=a, input2=b, cuda=args.cuda)\n",
        "build(with_cuda=True)\n",
    ]
    invalid = [
        Example(
            "import torch_fidelity\n\n\ndef fid(real_dir, fake_dir):\n"
            "    return torch_fidelity.calculate_metrics(input1=real_dir, input2=fake_dir, cuda=True, fid=True)\n",
            "import porter_runtime\nimport torch_fidelity\n\n\ndef fid(real_dir, fake_dir):\n"
            "    return torch_fidelity.calculate_metrics(input1=real_dir, input2=fake_dir, "
            "cuda=porter_runtime.is_cuda(), fid=True)\n",
        ),
        Example(
            "from lpips_metric import LPIPSScorer\nscorer = LPIPSScorer(net='alex', use_cuda=True)\n",
            "import porter_runtime\nfrom lpips_metric import LPIPSScorer\n"
            "scorer = LPIPSScorer(net='alex', use_cuda=porter_runtime.is_cuda())\n",
        ),
    ]

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        if len(original.args) != len(updated.args):
            return updated
        new = updated
        for old, arg in zip(original.args, updated.args):
            if old.keyword is not None and old.keyword.value in _FLAGS and is_true(old.value):
                new = replace_arg(new, arg, self.runtime_call("is_cuda"))
        if new is updated:
            return updated
        return self.rewrite(original, new, "the library's CUDA switch: True on CUDA, False (the CPU) elsewhere")
