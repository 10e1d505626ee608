"""`assert x.is_cuda`: a check that a tensor lives on CUDA, which no port can make true."""

from __future__ import annotations

from typing import Optional

import libcst as cst

from porter.rulebase.evidence import ComparesDeviceType, Name, String
from porter.rulebase.rule import Example, Needs, Rule, Safety


#: Device types a port can put a tensor on (the resolved device, or the CPU).
_PORTED_TYPES = frozenset({"cpu", "mps", "xpu"})


def _checked(test: cst.BaseExpression) -> Optional[cst.BaseExpression]:
    """``x`` of ``x.is_cuda``, ``x.device.type == "cuda"`` or ``x.device.type in ("cuda",
    "npu")`` (alone or as one operand of ``and``), else None."""
    if isinstance(test, cst.Attribute) and test.attr.value == "is_cuda":
        return test.value
    if isinstance(test, cst.Comparison) and len(test.comparisons) == 1:
        return _device_type_check(test)
    if isinstance(test, cst.BooleanOperation) and isinstance(test.operator, cst.And):
        return _checked(test.left) or _checked(test.right)
    return None


def _device_type_check(test: cst.Comparison) -> Optional[cst.BaseExpression]:
    """``x`` of ``x.device.type == "cuda"`` / ``in ("cuda", "npu")`` where no type the port
    uses (cpu, mps, xpu) is allowed (fla's fused cross-entropy)."""
    left, target = test.left, test.comparisons[0]
    if not (isinstance(left, cst.Attribute) and left.attr.value == "type" and isinstance(left.value, cst.Attribute)
            and left.value.attr.value == "device"):
        return None
    if isinstance(target.operator, cst.Equal) and isinstance(target.comparator, cst.SimpleString):
        allowed = {target.comparator.evaluated_value}
    elif isinstance(target.operator, cst.In) and isinstance(target.comparator, (cst.Tuple, cst.List, cst.Set)):
        values = [e.value for e in target.comparator.elements]
        if not all(isinstance(v, cst.SimpleString) for v in values):
            return None
        allowed = {v.evaluated_value for v in values}  # type: ignore[union-attr]
    else:
        return None
    return left.value.value if "cuda" in allowed and not allowed & _PORTED_TYPES else None


class CudaTensorAssert(Rule):
    """`assert x.is_cuda` is reported.

    What:
    Reports an `assert` whose test is `x.is_cuda` (or has it as an operand of
    `and`), the check a fused kernel's wrapper makes on its inputs.

    Why:
    Once the port sends tensors to `porter_runtime.device()`, they live on MPS or
    the CPU off CUDA, and `x.is_cuda` is False there: the assertion stops the run
    (`AssertionError`) although the tensor is where the rest of the code put it.

    Fix safety:
    Review (no rewrite). Whether the code behind the assertion is a CUDA kernel
    (which must be replaced) or plain PyTorch (which runs anywhere) is not visible
    from the assertion.

    In a module whose top level imports a CUDA-only package porter leaves as is
    (`import xentropy_cuda_lib`), the assertion restates what that import already
    requires: it is a note, and the import's finding is the one to act on.

    The same holds for `assert x.device.type == "cuda"` and `assert x.device.type in
    ("cuda", "npu")`: a list of types that names neither the CPU nor MPS.

    Known limits:
    `if not x.is_cuda: raise ...` is not reported.
    """

    code = "PT910"
    name = "cuda-tensor-assert"
    safety = Safety.REVIEW
    restates_requirement = True
    needs = Needs(evidence=Name("is_cuda") | ComparesDeviceType("cuda")
                  | (Name("device") & String(exact=frozenset({"cuda"}), word="cuda")))

    valid = [
        "def fused(x):\n    assert x.device.type in ('cuda', 'cpu')\n    return x * 2\n",
        "def fused(x):\n    if x.is_cuda:\n        return kernel(x)\n    return x * 2\n",
        "def fused(x):\n    assert x.is_contiguous()\n    return x * 2\n",
    ]
    invalid = [
        Example("def fused_rms_norm(x, weight, eps=1e-6):\n    assert x.is_cuda and weight.is_cuda\n"
                "    return _C.rms_norm(x, weight, eps)\n"),
        Example("def gather(feats):\n    assert feats.is_cuda, 'NCCL needs CUDA tensors'\n    return feats\n"),
        Example(  # flash-linear-attention's fused cross-entropy
            "def cross_entropy_loss(logits, labels):\n    assert logits.device.type in ('cuda', 'npu'), "
            "'only CUDA and NPU are supported'\n    return CrossEntropyLossFunction.apply(logits, labels)\n"),
        Example(  # the module imports the CUDA extension it wraps: a note (its import is the finding)
            "import torch\nimport xentropy_cuda_lib\n\n\nclass FusedCrossEntropyLoss(torch.nn.Module):\n"
            "    def forward(self, input, target):\n        assert input.is_cuda and target.is_cuda\n"
            "        return SoftmaxCrossEntropyLossFn.apply(input, target)\n",
            line=7, message="already needs CUDA through its CUDA-only import at line 2"),
    ]

    def leave_Assert(self, original: cst.Assert, updated: cst.Assert) -> cst.BaseSmallStatement:
        tensor = _checked(original.test)
        if tensor is None:
            return updated
        name = cst.Module([]).code_for_node(tensor)
        self.flag(original, f"asserts that `{name}` is a CUDA tensor: after the port it lives on "
                            "`porter_runtime.device()`, MPS or the CPU off CUDA, and this stops the run",
                  suggestion=f"assert `{name}.device.type == porter_runtime.device().type` if the code below is "
                             "plain PyTorch; if it calls a CUDA kernel, give it a PyTorch path off CUDA")
        return updated
