"""``torch.cuda.is_available()`` idioms: the device choice ("cuda" if available else
"cpu") and guards that mean "is there an accelerator"."""

from __future__ import annotations

import re
from textwrap import dedent
from typing import Optional, Union

import libcst as cst

from porter.rulebase import dist_guard
from porter.rulebase.availability_checks import (
    IS_AVAILABLE,
    availability_test,
    else_requirement,
    requirement,
)
from porter.rulebase.cuda_packages import is_cuda_only_module
from porter.rulebase.cuda_query_guard import shielded_check
from porter.rulebase.rule import (
    RUNTIME,
    Example,
    Needs,
    Rule,
    Safety,
    cuda_spec,
    string_value,
)
from porter.rulebase.name_choice import only_picks_names
from porter.rulebase.syntax import block_statements, index_args, small_statements

_FALLBACKS = frozenset({"cpu", "mps", "xpu"})

# A device choice: ("str" | "device", CUDA index or None).
Choice = tuple[str, Optional[int]]


def _torch_device_arg(rule: Rule, node: cst.BaseExpression) -> Optional[cst.BaseExpression]:
    """The one argument of ``torch.device(x)``."""
    if (isinstance(node, cst.Call) and len(node.args) == 1 and node.args[0].keyword is None
            and not node.args[0].star and rule.matches(node.func, "torch.device")):
        return node.args[0].value
    return None


def _cuda_value(rule: Rule, node: cst.BaseExpression) -> Optional[Choice]:
    """``"cuda[:i]"`` → ("str", i); ``torch.device("cuda[:i]")`` → ("device", i)."""
    spec = cuda_spec(node)
    if spec is not None:
        return ("str", spec[0])
    inner = _torch_device_arg(rule, node)
    spec = cuda_spec(inner) if inner is not None else None
    return ("device", spec[0]) if spec is not None else None


def _is_fallback(rule: Rule, node: cst.BaseExpression, kind: str) -> bool:
    """A non-CUDA device of the same kind ("cpu", torch.device("mps")...), or a ternary of them."""
    if isinstance(node, cst.IfExp):
        return _is_fallback(rule, node.body, kind) and _is_fallback(rule, node.orelse, kind)
    if kind == "device":
        inner = _torch_device_arg(rule, node)
        return inner is not None and string_value(inner) in _FALLBACKS
    return string_value(node) in _FALLBACKS


def _names_mps(rule: Rule, node: cst.BaseExpression) -> bool:
    """Whether a fallback (or a chain of them) already picks MPS somewhere."""
    if isinstance(node, cst.IfExp):
        return _names_mps(rule, node.body) or _names_mps(rule, node.orelse)
    inner = _torch_device_arg(rule, node)
    return string_value(inner if inner is not None else node) == "mps"


def _ternary(rule: Rule, node: cst.IfExp) -> Optional[tuple[Choice, cst.BaseExpression]]:
    """The CUDA choice of a ``cuda if torch.cuda.is_available() else cpu`` ternary, and its fallback."""
    polarity = availability_test(rule, node.test)
    if polarity is None:
        return None
    cuda, other = (node.body, node.orelse) if polarity else (node.orelse, node.body)
    choice = _cuda_value(rule, cuda)
    return (choice, other) if choice is not None and _is_fallback(rule, other, choice[0]) else None


def ternary_choice(rule: Rule, node: cst.IfExp) -> Optional[Choice]:
    """The device choice a ``cuda if torch.cuda.is_available() else cpu`` ternary makes,
    unless its fallback already picks MPS (then it is right on a Mac as written)."""
    found = _ternary(rule, node)
    return found[0] if found is not None and not _names_mps(rule, found[1]) else None


def _conjuncts(test: cst.BaseExpression) -> list[cst.BaseExpression]:
    """The operands of an ``a and b and c`` chain (one operand for anything else)."""
    if isinstance(test, cst.BooleanOperation) and isinstance(test.operator, cst.And) and not test.lpar:
        return _conjuncts(test.left) + _conjuncts(test.right)
    return [test]


def gated_choice(rule: Rule, node: cst.IfExp) -> Optional[Choice]:
    """``"cuda" if torch.cuda.is_available() and args.cuda else "cpu"``: the CUDA choice of
    a ternary whose test is an ``and`` of the availability call and other conditions."""
    operands = _conjuncts(node.test)
    found = [i for i, operand in enumerate(operands) if availability_test(rule, operand) is True]
    if len(operands) < 2 or len(found) != 1:
        return None
    choice = _cuda_value(rule, node.body)
    if choice is None or not _is_fallback(rule, node.orelse, choice[0]) or _names_mps(rule, node.orelse):
        return None
    return choice


def accelerator_test(rule: Rule, original: cst.BaseExpression, updated: cst.BaseExpression) -> cst.BaseExpression:
    """``updated`` with the availability call(s) swapped for the runtime's, walking ``and``
    in step with ``original``."""
    if availability_test(rule, original):
        return rule.runtime_call("is_accelerator_available").with_changes(lpar=updated.lpar, rpar=updated.rpar)
    if (isinstance(original, cst.BooleanOperation) and isinstance(original.operator, cst.And)
            and isinstance(updated, cst.BooleanOperation)):
        return updated.with_changes(left=accelerator_test(rule, original.left, updated.left),
                                    right=accelerator_test(rule, original.right, updated.right))
    return updated


def _lone_assign(block: cst.BaseSuite) -> Optional[cst.Assign]:
    """The single one-target assignment of a block with no comments, else None."""
    if not isinstance(block, cst.IndentedBlock) or block.header.comment is not None:
        return None
    if len(block.body) != 1 or any(line.comment for line in block.footer):
        return None
    stmt = block.body[0]
    if not isinstance(stmt, cst.SimpleStatementLine) or len(stmt.body) != 1:
        return None
    if stmt.trailing_whitespace.comment is not None or any(line.comment for line in stmt.leading_lines):
        return None
    assign = stmt.body[0]
    return assign if isinstance(assign, cst.Assign) and len(assign.targets) == 1 else None


def _branch_values(node: Union[cst.If, cst.Else, None]) -> Optional[list[tuple[cst.Assign, cst.BaseExpression]]]:
    """Each branch's (assignment, test) of an if/elif/else chain of lone assignments."""
    out: list[tuple[cst.Assign, cst.BaseExpression]] = []
    while node is not None:
        if out and any(line.comment for line in node.leading_lines):
            return None  # a comment above elif/else would be lost (the first one is kept)
        assign = _lone_assign(node.body)
        if assign is None:
            return None
        out.append((assign, node.test if isinstance(node, cst.If) else cst.Name("True")))
        node = node.orelse if isinstance(node, cst.If) else None
    return out


def _statement(rule: Rule, node: cst.If) -> Optional[tuple[cst.Assign, Choice, list[cst.BaseExpression]]]:
    """``if torch.cuda.is_available(): d = "cuda" else: d = "cpu"``: the CUDA branch's
    assignment, the choice it makes and the fallback values."""
    polarity = availability_test(rule, node.test)
    branches = _branch_values(node) if polarity is not None else None
    if not branches or len(branches) < 2:
        return None
    if polarity:
        cuda, others = branches[0][0], [a for a, _ in branches[1:]]
    elif len(branches) == 2:
        cuda, others = branches[1][0], [branches[0][0]]
    else:
        return None
    choice = _cuda_value(rule, cuda.value)
    if choice is None:
        return None
    target = cuda.targets[0].target
    for other in others:
        if not other.targets[0].target.deep_equals(target) or not _is_fallback(rule, other.value, choice[0]):
            return None
    return cuda, choice, [other.value for other in others]


def statement_choice(rule: Rule, node: cst.If) -> Optional[tuple[cst.Assign, Choice]]:
    """The statement form's CUDA assignment and choice, unless a fallback already
    picks MPS (then it is right on a Mac as written)."""
    found = _statement(rule, node)
    if found is None or any(_names_mps(rule, value) for value in found[2]):
        return None
    return found[0], found[1]


def _mps_statement_choice(rule: Rule, node: cst.If) -> bool:
    """A statement-form device choice that already picks MPS."""
    found = _statement(rule, node)
    return found is not None and any(_names_mps(rule, value) for value in found[2])


class CudaAvailableDevice(Rule):
    """`"cuda" if torch.cuda.is_available() else "cpu"` becomes the runtime's device.

    What:
    Rewrites the device choices that test `torch.cuda.is_available()`:
    `"cuda" if torch.cuda.is_available() else "cpu"` → `porter_runtime.device_str()`;
    `torch.device("cuda" if torch.cuda.is_available() else "cpu")` and
    `torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")` →
    `porter_runtime.device()`; and an `if torch.cuda.is_available(): d = "cuda"` /
    `else: d = "cpu"` statement → `d = porter_runtime.device_str()`. The fallback may
    be "cpu", "xpu" or a chain of them (`else "xpu" if ... else "cpu"`, `elif`), and
    `not torch.cuda.is_available()` with the branches swapped is understood. A
    ternary that also asks the user (`"cuda" if torch.cuda.is_available() and
    args.cuda else "cpu"`) keeps its other conditions: `porter_runtime.device_str()
    if porter_runtime.is_accelerator_available() and args.cuda else "cpu"`. A
    choice that already picks "mps" is right on a Mac and is left alone (PT202
    does not report it either). The result keeps the original's type: a string
    stays a string.

    Why:
    On a Mac the idiom picks the CPU and never uses the GPU.

    Fix safety:
    Safe. With CUDA the original picks "cuda" (or `torch.device("cuda")`) and the
    runtime returns exactly that device, `device_str()` is `"cuda"`, and an index
    (`"cuda:1"`) is kept. Without CUDA the original picked the fallback; the runtime
    picks MPS, then XPU, then CPU, or what `PORTER_DEVICE` names: the intended port.
    With other conditions, `is_accelerator_available()` is True exactly where
    `torch.cuda.is_available()` is on a CUDA machine, and is asked first, as before.

    Known limits:
    Only literal device strings are understood; `f"cuda:{rank}"` and conditions on a
    variable (`"cuda" if use_cuda else "cpu"`) are left alone (PT202 reports the
    variable). An if/else statement with comments inside is left alone, to keep them.
    """

    code = "PT201"
    name = "cuda-available-device"
    safety = Safety.SAFE
    needs = Needs(targets=frozenset({IS_AVAILABLE}))

    valid = [
        "def pick(torch):\n    return 'cuda' if torch.cuda.is_available() else 'cpu'\n",
        "import mylib as torch\ndevice = 'cuda' if torch.cuda.is_available() else 'cpu'\n",
        "import torch\ndevice = 'cuda' if use_cuda else 'cpu'\n",
        "import torch\nif x.device.type == 'cuda':\n    y = 1\n",
        "import torch\nif torch.cuda.is_available():\n    device = 'cuda'  # fast\nelse:\n    device = 'cpu'\n",
        # "or" means something else: CUDA is not required for the CUDA arm
        "import torch\ndevice = 'cuda' if torch.cuda.is_available() or args.force else 'cpu'\n",
        "import torch\ndevice = 'cuda' if args.cuda and not torch.cuda.is_available() else 'cpu'\n",
        # already picks MPS on a Mac: right as written
        dedent("""\
            import torch

            device = torch.device("cuda" if torch.cuda.is_available() else "mps" if torch.backends.mps.is_available() else "cpu")
            """),
        dedent("""\
            from torch.cuda import is_available

            if is_available():
                args.device = 'cuda'
            elif torch.backends.mps.is_available():
                args.device = 'mps'
            else:
                args.device = 'cpu'
            """),
    ]
    invalid = [
        Example(
            "import torch\ndevice = 'cuda' if torch.cuda.is_available() else 'cpu'\n",
            "import porter_runtime\nimport torch\ndevice = porter_runtime.device_str()\n",
        ),
        Example(
            "import torch as t\ndevice = t.device(\"cuda\" if t.cuda.is_available() else \"cpu\")\n",
            "import porter_runtime\nimport torch as t\ndevice = porter_runtime.device()\n",
        ),
        Example(
            "import torch\ndev = torch.device('cuda:0') if torch.cuda.is_available() else torch.device('cpu')\n",
            "import porter_runtime\nimport torch\ndev = porter_runtime.device(0)\n",
        ),
        Example(
            "from torch.cuda import is_available\n\n# pick the device\nif is_available():\n    args.device = 'cuda'\n"
            "elif args.xpu:\n    args.device = 'xpu'\nelse:\n    args.device = 'cpu'\nrun(args)\n",
            "import porter_runtime\n\n# pick the device\nargs.device = porter_runtime.device_str()\nrun(args)\n",
        ),
        Example(  # cleanrl's scripts: the user's --cuda flag stays in charge
            dedent("""\
                import torch

                device = torch.device("cuda" if torch.cuda.is_available() and args.cuda else "cpu")
                """),
            dedent("""\
                import porter_runtime
                import torch

                device = torch.device(porter_runtime.device_str() if porter_runtime.is_accelerator_available() and args.cuda else "cpu")
                """),
        ),
        Example(
            dedent("""\
                from torch.cuda import is_available

                dev = "cuda:0" if use_gpu and is_available() and not cfg.cpu else "cpu"
                """),
            dedent("""\
                import porter_runtime

                dev = porter_runtime.device_str(0) if use_gpu and porter_runtime.is_accelerator_available() and not cfg.cpu else "cpu"
                """),
        ),
        Example(
            "import torch\nd = 'cpu' if not torch.cuda.is_available() else 'cuda'\n",
            "import porter_runtime\nimport torch\nd = porter_runtime.device_str()\n",
        ),
        Example(
            "import torch\n\ndef get_device():\n    if torch.cuda.is_available():\n        device = torch.device('cuda')\n"
            "    else:\n        device = torch.device('cpu')\n    return device\n",
            "import porter_runtime\nimport torch\n\ndef get_device():\n    device = porter_runtime.device()\n    return device\n",
        ),
    ]

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self._inside_device_call: set[cst.IfExp] = set()

    def visit_Call(self, node: cst.Call) -> None:
        inner = _torch_device_arg(self, node)
        if isinstance(inner, cst.IfExp) and gated_choice(self, inner) is None:
            self._inside_device_call.add(inner)  # the whole torch.device(...) is replaced

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        inner = _torch_device_arg(self, original)
        if not isinstance(inner, cst.IfExp):
            return updated
        choice = ternary_choice(self, inner)
        if choice is None or choice[0] != "str":
            return updated
        new = self.runtime_call("device", *index_args(choice[1]))
        return self.rewrite(original, new, "the CUDA-or-CPU choice now resolves to the best device here")

    def leave_IfExp(self, original: cst.IfExp, updated: cst.IfExp) -> cst.BaseExpression:
        if original in self._inside_device_call:
            return updated
        choice = ternary_choice(self, original)
        if choice is None:
            return self._gated(original, updated)
        new = self._value(choice).with_changes(lpar=updated.lpar, rpar=updated.rpar)
        return self.rewrite(original, new, "the CUDA-or-CPU choice now resolves to the best device here")

    def _gated(self, original: cst.IfExp, updated: cst.IfExp) -> cst.BaseExpression:
        """The choice keeps its other conditions (``and args.cuda``): only the test of
        CUDA and the CUDA device become the runtime's."""
        choice = gated_choice(self, original)
        if choice is None:
            return updated
        new = updated.with_changes(body=self._value(choice).with_changes(lpar=updated.body.lpar,
                                                                         rpar=updated.body.rpar),
                                   test=accelerator_test(self, original.test, updated.test))
        return self.rewrite(original, new, "the accelerator choice now takes the best device here, "
                                           "under the same other conditions")

    def leave_If(self, original: cst.If, updated: cst.If) -> Union[cst.BaseStatement, cst.RemovalSentinel]:
        found = statement_choice(self, original)
        if found is None:
            return updated
        assign, choice = found
        stmt = cst.SimpleStatementLine(body=[assign.with_changes(value=self._value(choice))],
                                       leading_lines=original.leading_lines)
        return self.rewrite(original, stmt, "the CUDA-or-CPU choice now resolves to the best device here")

    def _value(self, choice: Choice) -> cst.BaseExpression:
        # A string choice is often a module constant: device_str resolves quietly.
        return self.runtime_call("device_str" if choice[0] == "str" else "device", *index_args(choice[1]))


class _Residue(cst.CSTVisitor):
    """Finds what still ties code to CUDA after porter's other rules ran."""

    def __init__(self) -> None:
        self.found: Optional[str] = None

    def _hit(self, what: str) -> bool:
        self.found = self.found or what
        return False

    def visit_Call(self, node: cst.Call) -> Optional[bool]:
        # porter's own rewrite (`porter_runtime.device(f"cuda:{r}")`) runs everywhere:
        # its CUDA arguments are requests the runtime maps, not a tie to CUDA.
        func = node.func
        ours = isinstance(func, cst.Attribute) and isinstance(func.value, cst.Name) and func.value.value == RUNTIME
        return False if ours else None

    def visit_Name(self, node: cst.Name) -> Optional[bool]:
        return self._hit(node.value) if "cuda" in node.value.lower() or "nccl" in node.value.lower() else None

    def visit_SimpleString(self, node: cst.SimpleString) -> Optional[bool]:
        return self._hit(node.value) if "cuda" in node.value or "nccl" in node.value else None

    def visit_FormattedStringText(self, node: cst.FormattedStringText) -> Optional[bool]:
        return self._hit(node.value) if "cuda" in node.value else None

    def visit_Import(self, node: cst.Import) -> bool:
        return self._hit("import")

    def visit_Raise(self, node: cst.Raise) -> Optional[bool]:
        # A bare `raise` in a handler re-raises what failed (a CUDA extension's import):
        # fatal where CUDA is, as TP604 keeps it, not on every accelerator.
        return self._hit("raise") if node.exc is None else None

    def visit_ImportFrom(self, node: cst.ImportFrom) -> bool:
        return self._hit("import")


class _CudaOnlyNames(cst.CSTVisitor):
    """Names (in an original subtree) that resolve into a CUDA-only package."""

    def __init__(self, rule: Rule) -> None:
        self.rule = rule
        self.found: Optional[str] = None

    def visit_Name(self, node: cst.Name) -> None:
        name = self.rule.qualname(node)
        if name is not None and is_cuda_only_module(name):
            self.found = self.found or name


def cuda_residue(rule: Rule, original: cst.CSTNode, updated: cst.CSTNode) -> Optional[str]:
    """What in the code still needs CUDA (after the other rules' rewrites), or None."""
    names = _CudaOnlyNames(rule)
    original.visit(names)
    if names.found:
        return names.found
    residue = _Residue()
    for before, after in _statement_pairs(original, updated):
        if not _inert_statement_line(rule, before):  # a CUDA flag is harmless elsewhere
            after.visit(residue)
    return residue.found


def _statement_pairs(original: cst.CSTNode, updated: cst.CSTNode) -> list[tuple[cst.CSTNode, cst.CSTNode]]:
    """The statements of two versions of a block side by side (the nodes themselves
    when they are not blocks or no longer line up)."""
    if isinstance(original, cst.BaseSuite) and isinstance(updated, cst.BaseSuite):
        before, after = block_statements(original), block_statements(updated)
        if len(before) == len(after):
            return list(zip(before, after))
    return [(original, updated)]


def _inert_statement_line(rule: Rule, stmt: cst.CSTNode) -> bool:
    """A statement line that only sets CUDA backend flags (TF32, cuDNN)."""
    small = list(small_statements(stmt)) if isinstance(stmt, cst.BaseStatement) else []
    return bool(small) and all(_inert_statement(rule, s, frozenset()) and not isinstance(s, cst.Pass)
                               for s in small)


# What only means something on CUDA: backend flags (TF32, cuDNN) and the NCCL backend's
# name; and the fallback that is right on every other device: gloo.
_CUDA_SETTINGS = ("torch.backends.cuda.", "torch.backends.cudnn.")
_CUDA_VALUES = frozenset({"nccl"})
_FALLBACK_VALUES = frozenset({"gloo"})


def _inert_statement(rule: Rule, stmt: cst.BaseSmallStatement, values: frozenset[str]) -> bool:
    """A CUDA backend flag set or called, ``pass``, or ``name = <one of values>``."""
    if isinstance(stmt, cst.Pass):
        return True
    if isinstance(stmt, cst.Expr) and isinstance(stmt.value, cst.Call):
        return (rule.qualname(stmt.value.func) or "").startswith(_CUDA_SETTINGS)
    if isinstance(stmt, cst.Assign):
        targets = [t.target for t in stmt.targets]
        if all((rule.qualname(t) or "").startswith(_CUDA_SETTINGS) for t in targets):
            return True
        return string_value(stmt.value) in values
    return False


def _inert(rule: Rule, side: cst.CSTNode, values: frozenset[str]) -> bool:
    """Whether one side of a guard (a block or a ternary's value) only holds CUDA
    backend flags or one of ``values`` (\"nccl\" on the CUDA side, \"gloo\" on the other)."""
    if isinstance(side, cst.BaseExpression):
        return string_value(side) in values
    stmts = block_statements(side)  # type: ignore[arg-type]
    if not stmts or isinstance(side, cst.IndentedBlock) and side.header.comment is not None:
        return False
    small = [s for stmt in stmts for s in small_statements(stmt)]
    return len(small) == len(stmts) and all(_inert_statement(rule, s, values) for s in small)


def _sides(node: Union[cst.If, cst.IfExp]) -> Optional[tuple[cst.CSTNode, Optional[cst.CSTNode]]]:
    """(what the test admits, what runs otherwise); None for an elif chain."""
    if isinstance(node, cst.IfExp):
        return node.body, node.orelse
    if isinstance(node.orelse, cst.If):
        return None
    return node.body, node.orelse.body if node.orelse is not None else None


def right_everywhere(rule: Rule, node: Union[cst.If, cst.IfExp], cuda_calls: list) -> bool:
    """A guard that is already right on every device: what it runs only with CUDA
    means nothing elsewhere (TF32 and cuDNN flags, "nccl"), and what it runs
    without CUDA is the fallback every other device wants ("gloo"); or a device
    choice whose fallback already picks MPS."""
    if isinstance(node, cst.IfExp):
        found = _ternary(rule, node)
        if found is not None and _names_mps(rule, found[1]):
            return True
    elif _mps_statement_choice(rule, node):
        return True
    sides = _sides(node)
    polarity = True if cuda_calls else availability_test(rule, node.test)
    if sides is None or polarity is None:
        return False
    cuda, other = sides if polarity else (sides[1], sides[0])
    if cuda is None and other is None:
        return False
    return ((cuda is None or _inert(rule, cuda, _CUDA_VALUES) or _only_reraises(cuda))
            and (other is None or _inert(rule, other, _FALLBACK_VALUES)))


def _only_reraises(side: cst.CSTNode) -> bool:
    """A block that is a bare ``raise``: in a handler, what failed (a CUDA extension's
    import, TP604) stays fatal where CUDA is, and nowhere else."""
    stmts = block_statements(side) if isinstance(side, cst.BaseSuite) else []
    small = [s for stmt in stmts for s in small_statements(stmt)]
    return len(stmts) == 1 and len(small) == 1 and isinstance(small[0], cst.Raise) and small[0].exc is None


_SUGGESTION = "porter_runtime.is_accelerator_available()"
_NOTE = ("`torch.cuda.is_available()` is False without CUDA, so on a Mac this takes the "
         "CPU path even though MPS is there")


class _MpsCheck(cst.CSTVisitor):
    """Finds a call of ``torch.backends.mps.is_available()`` (by qualified name)."""

    def __init__(self, rule: Rule, scope: cst.CSTNode) -> None:
        self.rule = rule
        self.scope = scope
        self.found = False

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        return node is self.scope or not isinstance(self.scope, cst.Module)  # the module's own code only

    def visit_ClassDef(self, node: cst.ClassDef) -> bool:
        return not isinstance(self.scope, cst.Module)

    def visit_Call(self, node: cst.Call) -> Optional[bool]:
        if self.rule.qualname(node.func) == "torch.backends.mps.is_available":
            self.found = True
        return not self.found


class _TypeFlags(cst.CSTVisitor):
    """Names that are the test of an ``if`` or a ternary whose CUDA side names a legacy
    CUDA tensor type (``Tensor = torch.cuda.FloatTensor if cuda else torch.FloatTensor``)."""

    def __init__(self, rule: Rule) -> None:
        super().__init__()
        self.rule = rule
        self.names: set[str] = set()

    def visit_IfExp(self, node: cst.IfExp) -> None:
        self._test(node.test, node.body)

    def visit_If(self, node: cst.If) -> None:
        self._test(node.test, node.body)

    def _test(self, test: cst.BaseExpression, body: cst.CSTNode) -> None:
        if isinstance(test, cst.Name) and _names_cuda_type(self.rule, body):
            self.names.add(test.value)


class _CudaTypes(cst.CSTVisitor):
    def __init__(self, rule: Rule) -> None:
        super().__init__()
        self.rule, self.found = rule, False

    def visit_Attribute(self, node: cst.Attribute) -> bool:
        name = self.rule.qualname(node)
        self.found = self.found or bool(name and name.startswith("torch.cuda.") and name.endswith("Tensor"))
        return not self.found


def _names_cuda_type(rule: Rule, node: cst.CSTNode) -> bool:
    finder = _CudaTypes(rule)
    node.visit(finder)
    return finder.found


#: Flags that turn on half precision (``opt.half``, ``use_fp16``, ``self.amp``).
_HALF_FLAG = re.compile(r"^(?:use_)?(?:half|fp16|amp|mixed_precision)$")


def _is_half_flag(target: cst.BaseExpression) -> bool:
    name = target.attr.value if isinstance(target, cst.Attribute) else getattr(target, "value", "")
    return isinstance(name, str) and bool(_HALF_FLAG.match(name))


def _and_chain(value: cst.BaseExpression) -> bool:
    """The availability answer itself, or ``and``-ed with other conditions: True only with CUDA."""
    if isinstance(value, cst.BooleanOperation):
        return isinstance(value.operator, cst.And) and _and_chain(value.left) and _and_chain(value.right)
    return not isinstance(value, (cst.UnaryOperation, cst.IfExp))


class CudaAvailableGuard(Rule):
    """`if torch.cuda.is_available():` around device-neutral code tests `is_accelerator_available()`.

    What:
    Rewrites `torch.cuda.is_available()` to `porter_runtime.is_accelerator_available()`
    where it is the test of an `if`/`elif` or a ternary (alone or as an operand of
    `and`), and the code it guards no longer needs CUDA once porter's other rules ran:
    no name or string mentioning cuda or nccl, no import, nothing from a CUDA-only
    package (apex, flash_attn, xformers, triton, bitsandbytes, deepspeed, ...).
    porter's own calls (`porter_runtime.device(f"cuda:{r}")`) and CUDA backend flags
    (`torch.backends.cuda.*`, `torch.backends.cudnn.*`: harmless elsewhere) don't
    count as needing CUDA. A guard that is already right on every device is left
    alone with no finding: its CUDA side only sets CUDA backend flags or picks
    "nccl", its other side (if any) only picks "gloo". An `elif
    torch.cuda.is_available():` whose `else` only reports and stops (`print(...)`;
    `sys.exit(1)`) becomes that `else`, led by `porter_runtime.require_device(msg)`. A
    device ternary left as it is (`f"cuda:{rank}" if torch.cuda.is_available() else
    "cpu"`) is a note (severity "info"): its CPU arm runs off CUDA; so is the answer
    used as a repeat count (`(torch.device("cuda"),) * torch.cuda.is_available()`), and
    a check that only keeps a question about CUDA's own device from being asked
    without CUDA (`not torch.cuda.is_available() or torch.cuda.is_bf16_supported()`,
    `torch.cuda.is_available() and torch.cuda.get_device_capability()[0] >= 8`
    outside an `if` test; porter.rulebase.cuda_query_guard), and
    any use in a function (or module) that also asks `torch.backends.mps.is_available()`:
    its own device choice already has an MPS branch; and a flag set from it that
    nothing reads (`self.sync_cuda = torch.cuda.is_available()` with no other
    `.sync_cuda` in the repository); and a half-precision flag set from it
    (`opt.half = torch.cuda.is_available() and opt.device != "cpu"`): off CUDA the
    code runs in float32, a speed choice that runs everywhere; and a flag whose
    every use picks between names (`"onnxruntime-gpu" if cuda else "onnxruntime"`,
    porter.rulebase.name_choice): off CUDA the CPU name, which runs. Every
    other use (`use_cuda = torch.cuda.is_available()`, `assert`, `not ...`, a guard
    around CUDA-only code) is reported with a suggestion, except where the answer is
    only printed (`print(...)`, an f-string) and where it is a requirement
    (`assert torch.cuda.is_available()`, `if not ...: raise`): PT903's.

    Why:
    `torch.cuda.is_available()` is False on a Mac, so code that means "is there an
    accelerator" runs on the CPU although MPS is there.

    Fix safety:
    Safe. With CUDA both calls are True, so the same branch runs. Without CUDA the
    runtime says whether MPS or XPU is there (never a faked `is_available()`), and
    the guarded code, being free of CUDA-only calls, runs there. `PORTER_DEVICE=cpu`
    makes it False. A required `elif`: on CUDA the same setup runs (the `else` never
    did) and `require_device` does nothing; elsewhere the setup runs on the resolved
    device instead of the program stopping.

    Known limits:
    The guarded code's callees are not followed: a guarded call of a local function
    that uses a CUDA extension would now run on a Mac. The check is syntactic and
    conservative: a guarded `print("cuda ok")` keeps the guard as it was. Arguments
    `pin_memory=torch.cuda.is_available()` are left to PT401.
    """

    code = "PT202"
    name = "cuda-available-guard"
    safety = Safety.SAFE
    needs = Needs(targets=frozenset({IS_AVAILABLE}))

    valid = [
        "def f(torch):\n    if torch.cuda.is_available():\n        model.half()\n",
        "import mylib as torch\nuse_gpu = torch.cuda.is_available()\n",
        "import torch\nloader = DataLoader(ds, pin_memory=torch.cuda.is_available())\n",
        "import torch\ndevice = 'cuda' if torch.cuda.is_available() else 'cpu'\n",
        "import torch\nprint('CUDA:', torch.cuda.is_available())\nlog(f'cuda={torch.cuda.is_available()}')\n",
        # right on every device: CUDA-only flags and the NCCL/gloo choice
        dedent("""\
            import torch

            if torch.cuda.is_available():
                torch.backends.cuda.matmul.allow_tf32 = True
                torch.backends.cudnn.allow_tf32 = True
            """),
        dedent("""\
            import torch as t
            from torch.backends import cudnn

            if args.gpu and t.cuda.is_available():
                cudnn.benchmark = True
            """),
        dedent("""\
            import torch
            import torch.distributed as dist

            backend = "gloo" if not torch.cuda.is_available() else "nccl"
            dist.init_process_group(backend="nccl" if torch.cuda.is_available() else "gloo")
            """),
        # TP604's optional extension: its import stays fatal where CUDA is
        dedent("""\
            import torch

            try:
                import rotary_emb
            except ImportError:
                if torch.cuda.is_available():
                    raise
                rotary_emb = None
            """),
        dedent("""\
            from torch.cuda import is_available

            if is_available():
                backend = 'nccl'
            else:
                backend = 'gloo'
            """),
    ]
    invalid = [
        Example(
            "import torch\n\nif torch.cuda.is_available():\n    torch.backends.cudnn.benchmark = True\n"
            "    model = model.to(device)\n",
            "import porter_runtime\nimport torch\n\nif porter_runtime.is_accelerator_available():\n"
            "    torch.backends.cudnn.benchmark = True\n    model = model.to(device)\n",
        ),
        Example(
            "import torch as t\n\nif args.gpu and t.cuda.is_available():\n    model = nn.DataParallel(model)\n",
            "import porter_runtime\nimport torch as t\n\nif args.gpu and porter_runtime.is_accelerator_available():\n"
            "    model = nn.DataParallel(model)\n",
        ),
        Example(
            "from torch.cuda import is_available\nbatch = 64 if is_available() else 8\n",
            "import porter_runtime\nbatch = 64 if porter_runtime.is_accelerator_available() else 8\n",
        ),
        Example("import torch\nuse_cuda = not args.no_cuda and torch.cuda.is_available()\n"),
        Example("import torch\nif torch.cuda.is_available():\n    model = apex.amp.initialize(model)\n    x = x.cuda()\n"),
        Example("import torch\nif not torch.cuda.is_available():\n    args.amp = False\n"),
        Example(  # PyTorch-GAN: the flag picks a legacy CUDA type, which a Mac lacks: kept, reported
            dedent("""\
                import torch

                cuda = True if torch.cuda.is_available() else False
                Tensor = torch.cuda.FloatTensor if cuda else torch.FloatTensor
                z = Tensor(np.random.normal(0, 1, (batch_size, latent_dim)))
                """),
            line=3, message="chooses a legacy CUDA tensor type",
        ),
        Example(  # dino's init_distributed_mode: the one-process setup needs no CUDA, the else only refuses
            dedent("""\
                import os
                import sys
                import torch

                def init_distributed_mode(args):
                    if "RANK" in os.environ:
                        args.rank = int(os.environ["RANK"])
                    elif torch.cuda.is_available():
                        print("Will run the code on one GPU.")
                        args.rank, args.gpu, args.world_size = 0, 0, 1
                    else:
                        print("Does not support training without GPU.")
                        sys.exit(1)
                """),
            dedent("""\
                import porter_runtime
                import os
                import torch

                def init_distributed_mode(args):
                    if "RANK" in os.environ:
                        args.rank = int(os.environ["RANK"])
                    else:
                        porter_runtime.require_device("Does not support training without GPU.")
                        print("Will run the code on one GPU.")
                        args.rank, args.gpu, args.world_size = 0, 0, 1
                """),
        ),
        Example(  # the setup itself still needs CUDA: reported, not rewritten
            dedent("""\
                from torch.cuda import is_available

                if args.resume:
                    load(args.resume)
                elif is_available():
                    import apex
                    apex.amp.register_half_function(torch, "einsum")
                else:
                    raise SystemExit("needs a GPU")
                """),
            line=5, message="still needs CUDA",
        ),
        Example(  # porter's own rewrite inside the guard does not hold it back
            dedent("""\
                import porter_runtime
                import torch

                def setup(rank):
                    if torch.cuda.is_available():
                        porter_runtime.set_device(rank)
                        return porter_runtime.device(f"cuda:{rank}")
                """),
            dedent("""\
                import porter_runtime
                import torch

                def setup(rank):
                    if porter_runtime.is_accelerator_available():
                        porter_runtime.set_device(rank)
                        return porter_runtime.device(f"cuda:{rank}")
                """),
            line=5, message="also admits MPS",
        ),
        Example(  # guided-diffusion's TrainLoop sets a flag that nothing reads: a note
            dedent("""\
                import torch as th

                class TrainLoop:
                    def __init__(self, model, batch_size):
                        self.model = model
                        self.batch_size = batch_size
                        self.sync_cuda = th.cuda.is_available()
                """),
            line=7, message="the flag it sets is read nowhere",
        ),
        Example(  # half precision only on CUDA: off CUDA float32 runs, a speed choice (a note)
            dedent("""\
                import torch

                def parse_opt(opt):
                    opt.half = torch.cuda.is_available() and opt.device != "cpu"  # FP16 for fastest results
                    return opt
                """),
            line=4, message="half precision",
        ),
        Example(  # a flag that only picks a package and a provider: the CPU ones run off CUDA (a note)
            dedent("""\
                import torch

                def load_onnx(w, device):
                    cuda = torch.cuda.is_available() and device.type != "cpu"  # use CUDA
                    check_requirements(("onnx", "onnxruntime-gpu" if cuda else "onnxruntime"))
                    providers = ["CUDAExecutionProvider", "CPUExecutionProvider"] if cuda else ["CPUExecutionProvider"]
                    return onnxruntime.InferenceSession(w, providers=providers)
                """),
            line=4, message="only picks between names",
        ),
        Example(  # the same flag also guards code: a finding
            dedent("""\
                import torch

                def load_onnx(w, device):
                    cuda = torch.cuda.is_available() and device.type != "cpu"
                    providers = ["CUDAExecutionProvider"] if cuda else ["CPUExecutionProvider"]
                    if cuda:
                        torch.backends.cudnn.benchmark = True
                    return cuda, providers
                """),
            line=4, message="if it means",
        ),
        Example(  # a flag that is read decides something: a finding
            dedent("""\
                import torch as th

                class TrainLoop:
                    def __init__(self, model):
                        self.sync_cuda = th.cuda.is_available()

                    def step(self):
                        if self.sync_cuda:
                            th.cuda.synchronize()
                """),
            line=5, message="if it means \"is there an accelerator\"",
        ),
        Example(  # the example picks MPS itself: right on a Mac as written, a note
            dedent("""\
                import torch

                def main(args):
                    use_cuda = args.cuda and torch.cuda.is_available()
                    use_mps = args.mps and torch.backends.mps.is_available()
                    if use_cuda:
                        device = torch.device("cuda")
                    elif use_mps:
                        device = torch.device("mps")
                    else:
                        device = torch.device("cpu")
                    return device
                """),
            line=4, message="so it picks MPS on a Mac as written: for information",
        ),
        Example(  # the devices a test runs on: CUDA's entry is left out off CUDA, the CPU one runs
            dedent("""\
                import torch

                class ShampooGraftingTest(unittest.TestCase):
                    available_devices = (torch.device("cpu"),) + (
                        torch.device("cuda"),
                    ) * torch.cuda.is_available()
                """),
            line=6, message="they are left out and the rest runs: for information",
        ),
        Example(  # the check only keeps CUDA's bf16 question off machines without CUDA: a note
            dedent("""\
                import torch

                def default_precision(training: bool) -> str:
                    if not torch.cuda.is_available() or torch.cuda.is_bf16_supported():
                        return "bf16-mixed" if training else "bf16-true"
                    return "16-mixed" if training else "16-true"
                """),
            line=4, message="only keeps a question about CUDA's own device",
        ),
        Example(  # the same shield in an assignment, a capability compared
            dedent("""\
                import torch

                use_bf16 = torch.cuda.is_available() and torch.cuda.get_device_capability()[0] >= 8
                """),
            line=3, message="only keeps a question about CUDA's own device",
        ),
        Example(  # the other operand is no CUDA query: still a finding
            dedent("""\
                import torch

                def default_precision(args) -> str:
                    if not torch.cuda.is_available() or args.fp32:
                        return "32-true"
                    return "16-mixed"
                """),
            line=4, message="if it means",
        ),
        Example(  # cleanrl's multi-GPU script: the CPU fallback runs off CUDA, so a note, not a finding
            dedent("""\
                import torch

                device = torch.device(f"cuda:{local_rank}" if torch.cuda.is_available() and args.cuda else "cpu")
                """),
            line=3, message="without CUDA it picks the CPU, which runs: for information",
        ),
        Example(  # a test skipped off CUDA never runs on a Mac: its guard is a note, not a finding
            dedent("""\
                import unittest

                import torch

                @unittest.skipIf(not torch.cuda.is_available(), "Skip when CUDA is not available")
                class ShampooGPUTest(unittest.TestCase):
                    def test_step(self):
                        model = torch.nn.Linear(4, 4).cuda()
                """),
            line=5, message="for information: a test skipped off CUDA, line 5",
        ),
        Example(  # a CUDA-only flag is harmless elsewhere: device-neutral code next to it is ported
            dedent("""\
                import torch

                if torch.cuda.is_available():
                    torch.backends.cuda.matmul.allow_tf32 = True
                    model = model.to(device)
                """),
            dedent("""\
                import porter_runtime
                import torch

                if porter_runtime.is_accelerator_available():
                    torch.backends.cuda.matmul.allow_tf32 = True
                    model = model.to(device)
                """),
        ),
    ]

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self._handled: set[cst.Call] = set()  # calls decided at their if/ternary
        self._dist_guards: Optional[set[int]] = None
        self._flags: dict[int, str] = {}  # id of a ternary -> the name it is assigned to
        self._type_flags: Optional[set[str]] = None
        self._elifs: set[int] = set()  # ids of the `elif` branches seen
        self._repeats: set[cst.BaseExpression] = set()  # availability calls used as a repeat count
        self._functions: list[cst.FunctionDef] = []
        self._mps_scopes: dict[int, bool] = {}
        self._unread_flags: set[cst.BaseExpression] = set()  # availability calls setting a flag nothing reads
        self._half_flags: set[cst.BaseExpression] = set()  # availability calls setting a half-precision flag
        self._name_flags: set[cst.BaseExpression] = set()  # ... setting a flag that only picks names
        self._shields: set[cst.BaseExpression] = set()  # checks that only keep a CUDA query off non-CUDA machines

    def visit_If(self, node: cst.If) -> None:
        if isinstance(node.orelse, cst.If):
            self._elifs.add(id(node.orelse))
        self._handled.update(self._calls(node.test))  # decided in leave_If (or by PT201)
        if self._skips_distributed(node):  # PT304's, also once ported
            self._handled.update(dist_guard.negated_availability(self, n) or n.left.expression
                                 for n, _ in dist_guard.guard_operands(self, node.test))

    def _skips_distributed(self, node: cst.If) -> bool:
        if self._dist_guards is None:
            self._dist_guards = dist_guard.distributed_guards(self)
        return id(node) in self._dist_guards

    def visit_IfExp(self, node: cst.IfExp) -> None:
        self._handled.update(self._calls(node.test))

    def visit_Assert(self, node: cst.Assert) -> None:
        if requirement(self, node) is not None:
            self._handled.update(self._calls(node.test))  # PT903

    def visit_Call(self, node: cst.Call) -> None:
        if isinstance(node.func, cst.Name) and node.func.value == "print" and self.qualname(node.func) is None:
            for arg in node.args:  # only reported
                self._handled.update(self._calls(arg.value))

    def visit_Assign(self, node: cst.Assign) -> None:
        if isinstance(node.value, cst.IfExp) and len(node.targets) == 1 and isinstance(node.targets[0].target, cst.Name):
            self._flags[id(node.value)] = node.targets[0].target.value
        if len(node.targets) == 1 and availability_test(self, node.value) and self._unread(node.targets[0].target):
            self._unread_flags.add(node.value)
        if len(node.targets) == 1 and _is_half_flag(node.targets[0].target) and _and_chain(node.value):
            self._half_flags.update(c for c in self._calls(node.value) if availability_test(self, c))
        target = node.targets[0].target if len(node.targets) == 1 else None
        if isinstance(target, cst.Name) and self._functions and _and_chain(node.value) \
                and only_picks_names(self._functions[-1], target.value):
            self._name_flags.update(c for c in self._calls(node.value) if availability_test(self, c))

    def _unread(self, target: cst.BaseExpression) -> bool:
        """A flag nothing reads: ``self.sync_cuda`` with no other ``.sync_cuda`` in the tree
        (porter.project.flags; this file alone without a project), or a name this file
        never reads and no other module imports."""
        source = self.ctx.source
        if isinstance(target, cst.Attribute):
            name = target.attr.value
            if self.ctx.project is not None:
                return name in self.ctx.project.unread_flags
            return len(re.findall(rb"\." + re.escape(name.encode()) + rb"\b", source)) == 1
        if isinstance(target, cst.Name):
            name = target.value
            alone = len(re.findall(rb"(?<![\w.])" + re.escape(name.encode()) + rb"\b", source)) == 1
            return alone and (self.ctx.project is None or not self.ctx.project.read_elsewhere(self.ctx.path, name))
        return False

    def visit_BooleanOperation(self, node: cst.BooleanOperation) -> None:
        shielded = shielded_check(self, node)  # porter.rulebase.cuda_query_guard
        if shielded is not None:
            self._shields.add(shielded)

    def visit_BinaryOperation(self, node: cst.BinaryOperation) -> None:
        if isinstance(node.operator, cst.Multiply):  # `(torch.device("cuda"),) * is_available()`
            self._repeats.update(side for side in (node.left, node.right) if availability_test(self, side))

    def visit_Arg(self, node: cst.Arg) -> None:
        if node.keyword is not None and node.keyword.value == "pin_memory":
            self._handled.update(self._calls(node.value))  # PT401

    def visit_FormattedStringExpression(self, node: cst.FormattedStringExpression) -> None:
        self._handled.update(self._calls(node.expression))  # only reported, as in a log line

    def visit_DictElement(self, node: cst.DictElement) -> None:
        if string_value(node.key) == "pin_memory":
            self._handled.update(self._calls(node.value))  # PT401

    def leave_If(self, original: cst.If, updated: cst.If) -> Union[cst.If, cst.Else]:
        if statement_choice(self, original) is not None:
            return updated
        found = else_requirement(self, original) if id(original) in self._elifs else None
        if found is not None and cuda_residue(self, original.body, updated.body) is None:
            return self._required(original, updated, found[0])
        return self._guard(original, updated, original.body, updated.body)

    def _required(self, original: cst.If, updated: cst.If, message) -> Union[cst.If, cst.Else]:
        """``elif torch.cuda.is_available(): <setup> else: <report and stop>`` becomes
        ``else: porter_runtime.require_device(message); <setup>``: the setup ran wherever
        CUDA was, and now runs on the device the runtime resolves."""
        call = self.runtime_call("require_device", *([message] if message is not None else []))
        body = updated.body.with_changes(body=[cst.SimpleStatementLine([cst.Expr(call)]), *updated.body.body])
        new = cst.Else(body=body, leading_lines=original.leading_lines)
        return self.rewrite(original, new, "the CUDA requirement of its `else` is now met by the device the "
                                           "runtime resolves (MPS, XPU or CPU off CUDA), where the setup it "
                                           "guarded runs")

    def leave_IfExp(self, original: cst.IfExp, updated: cst.IfExp) -> cst.IfExp:
        if ternary_choice(self, original) is not None or gated_choice(self, original) is not None:
            return updated  # PT201's
        return self._guard(original, updated, original.body, updated.body)

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.Call:
        if original in self._handled or availability_test(self, original) is None:
            return updated
        if original in self._unread_flags:
            self.note(original, _NOTE + "; the flag it sets is read nowhere, so it decides nothing: for information",
                      suggestion=_SUGGESTION)
            return updated
        if original in self._name_flags:
            self.note(original, _NOTE + "; here the flag it sets only picks between names (a package, a "
                      "provider), and without CUDA the CPU one, which runs: for information", suggestion=_SUGGESTION)
            return updated
        if original in self._half_flags:
            self.note(original, _NOTE + "; here it only turns half precision on where CUDA is, so off CUDA "
                      "float32 runs (a speed choice): for information", suggestion=_SUGGESTION)
            return updated
        if original in self._shields:
            self.note(original, _NOTE + "; here it only keeps a question about CUDA's own device (bf16 support, "
                      "capability, properties) from being asked without CUDA; off CUDA the path the CPU takes "
                      "runs: for information", suggestion=_SUGGESTION)
            return updated
        if original in self._repeats:
            self.note(original, _NOTE + "; here it only repeats CUDA entries once or not at all, so off CUDA "
                      "they are left out and the rest runs: for information", suggestion=_SUGGESTION)
            return updated
        self._report(original, _NOTE + "; if it means \"is there an accelerator\", use "
                  f"`{_SUGGESTION}` (and `porter_runtime.device()` for the device)", suggestion=_SUGGESTION)
        return updated

    def _guard(self, original, updated, body, new_body):
        test = original.test
        if isinstance(original, cst.If) and requirement(self, original) is not None:
            return updated  # PT903
        if isinstance(original, cst.If) and self._skips_distributed(original):
            return updated  # PT304
        if right_everywhere(self, original, self._guard_calls(test)):
            return updated
        if availability_test(self, test) is False:
            self._report(test, _NOTE + "; code it guards now runs on a Mac",
                      suggestion=f"if not {_SUGGESTION}:")
            return updated
        if not self._guard_calls(test):
            return updated
        if isinstance(original, cst.IfExp) and self._selects_cuda_type(original):
            self.flag(test, f"{_NOTE}; the flag it sets chooses a legacy CUDA tensor type (`torch.cuda.FloatTensor "
                      "if cuda else torch.FloatTensor`), which exists only with CUDA, so it is not rewritten and "
                      "the code runs on the CPU off CUDA, as before",
                      suggestion="build tensors with torch.tensor(..., device=porter_runtime.device()) instead of "
                                 "the legacy types, then test porter_runtime.is_accelerator_available()")
            return updated
        residue = cuda_residue(self, body, new_body)
        if residue is not None and self._falls_back_to_cpu(original):
            self.note(test, f"{_NOTE}; the CUDA choice (`{residue}`) is not rewritten, and without CUDA it picks "
                      "the CPU, which runs: for information", suggestion="porter_runtime.device()")
            return updated
        if residue is not None:
            self._report(test, f"{_NOTE}; the code it guards still needs CUDA (`{residue}`), so it is not "
                      "rewritten; port the guarded code, then test the runtime", suggestion=f"if {_SUGGESTION}:")
            return updated
        new_test = accelerator_test(self, original.test, updated.test)
        if self.rewrite(original.test, new_test, "the guard now also admits MPS and XPU") is original.test:
            return updated  # suppressed by a `# porter: ignore` comment
        return updated.with_changes(test=new_test)

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        self._functions.append(node)

    def leave_FunctionDef(self, original: cst.FunctionDef, updated: cst.FunctionDef) -> cst.FunctionDef:
        self._functions.pop()
        return updated

    def _report(self, node: cst.CSTNode, message: str, *, suggestion: str) -> None:
        """A finding, or a note where the function (or module) asks for MPS itself."""
        if self._asks_for_mps():
            self.note(node, message + "; this code also asks `torch.backends.mps.is_available()`, so it picks "
                      "MPS on a Mac as written: for information", suggestion=suggestion)
        else:
            self.flag(node, message, suggestion=suggestion)

    def _asks_for_mps(self) -> bool:
        """Whether the enclosing function (or the module) calls ``torch.backends.mps.is_available()``:
        a device choice of its own with an MPS branch (yolov5's select_device, an example's
        ``use_mps = args.mps and torch.backends.mps.is_available()``)."""
        scope = self._functions[-1] if self._functions else self.ctx.module
        if id(scope) not in self._mps_scopes:
            finder = _MpsCheck(self, scope)
            scope.visit(finder)
            self._mps_scopes[id(scope)] = finder.found
        return self._mps_scopes[id(scope)]

    def _falls_back_to_cpu(self, node) -> bool:
        """A device ternary whose other arm is the CPU (``torch.device(f"cuda:{r}" if
        torch.cuda.is_available() and args.cuda else "cpu")``): right, if slow, off CUDA."""
        if not isinstance(node, cst.IfExp) or availability_test(self, node.test) is False:
            return False
        return _is_fallback(self, node.orelse, "str") or _is_fallback(self, node.orelse, "device")

    def _selects_cuda_type(self, node: cst.IfExp) -> bool:
        """``cuda = True if torch.cuda.is_available() else False`` whose name the file tests to
        pick ``torch.cuda.FloatTensor``: admitting MPS would make it pick that type on a Mac,
        where it raises; and ``x.type(Tensor)`` can name no MPS type."""
        name = self._flags.get(id(node))
        if name is None:
            return False
        if self._type_flags is None:
            finder = _TypeFlags(self)
            self.ctx.module.visit(finder)
            self._type_flags = finder.names
        return name in self._type_flags

    def _guard_calls(self, test: cst.BaseExpression) -> list[cst.Call]:
        """The availability calls that are ``test`` or ``and`` operands of it."""
        if availability_test(self, test):
            return [test]  # type: ignore[list-item]
        if isinstance(test, cst.BooleanOperation) and isinstance(test.operator, cst.And):
            return self._guard_calls(test.left) + self._guard_calls(test.right)
        return []

    def _calls(self, test: cst.BaseExpression) -> list[cst.Call]:
        if isinstance(test, cst.UnaryOperation):
            return self._calls(test.expression)
        return self._guard_calls(test)
