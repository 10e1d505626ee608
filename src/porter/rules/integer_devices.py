"""Integer GPU indices as research code writes them: `.to(local_rank)`, `torch.device(0)` (PT901).

PT901 is written once. What it knows (index-like names, the calls whose result is an
index, the calls that use an argument as an index) lives in the tables at the top of
its section: the LibCST visitor `_DeviceIndexUses` decides from them, and the
pre-filter's byte patterns (`_BYTE_PATTERNS`) and its evidence clauses
(`_FILE_MAY_MATCH`, `_UNIT_MAY_MATCH`) are derived from the same tables. The
filters may let through more than the rule changes, never less."""

from __future__ import annotations

import re
from dataclasses import dataclass
from textwrap import dedent
from typing import Optional

import libcst as cst

from porter.rulebase.evidence import ANY_NAME, AnyOf, Calls, InFile, Keyword, Passes, String, Uses
from porter.rulebase.families.devices.indices import COUNT as _COUNT
from porter.rulebase.families.devices.indices import CURRENT as _CURRENT
from porter.rulebase.families.devices.indices import LOCAL_RANK as _LOCAL_RANK
from porter.rulebase.families.devices.indices import index_source
from porter.rulebase.matching import dotted_name
from porter.rulebase.needs import literal_patterns
from porter.rulebase.rule import BYTES_GAP, Example, Needs, Rule, Safety, string_value
from porter.rulebase.syntax import (
    argument,
    argument_pair,
    callee_name,
    int_value,
    replace_arg,
)
from porter.rulebase.walk import nodes_of

# -- integer devices (PT901): what the rule knows, said once ----------------------

#: Names that hold a GPU index in research code (`rank`, `local_rank`, `args.gpu`, `gpu_id`).
_INDEX_WORDS = r"(?:local_?)?rank|gpu(?:_?(?:id|idx|index|num))?|device_?(?:id|idx|index)|cuda_?(?:id|idx)"
_INDEX_NAME = re.compile(rf"^(?:{_INDEX_WORDS})$")

_SOURCES = _CURRENT | _COUNT
#: Tensor methods that make a tensor on `device=` (`x.new_zeros(n, device=i)`).
_TENSOR_FACTORIES = frozenset({"new_zeros", "new_ones", "new_empty", "new_full", "new_tensor"})


@dataclass(frozen=True)
class _IndexUse:
    """A call that uses an argument as a CUDA index: the one at ``position`` or passed
    as ``keyword=``, when the call's first argument is the string ``first`` (if set)."""

    call: str
    keyword: str
    position: int
    first: Optional[str] = None

    @property
    def needle(self) -> str:
        """A word the source must spell where this call is: the rarer one."""
        return self.first or self.call


#: `.cuda(x)`, `set_device(x)`, `torch.device("cuda", x)`: evidence that `x` is a device.
_INDEX_USES = {use.call: use for use in (
    _IndexUse("cuda", "device", 0), _IndexUse("set_device", "index", 0), _IndexUse("device", "index", 1, "cuda"))}


_INDEX_VALUE = (rb"(?:\(" + BYTES_GAP + rb")*(?:[0-9]|"
                rb"(?:[A-Za-z_][A-Za-z0-9_]*" + BYTES_GAP + rb"\." + BYTES_GAP + rb")*"
                rb"(?:" + _INDEX_WORDS.encode() + rb")\b)")
#: Any of these (each starts with a literal, so the regex engine scans for it fast).
_BYTE_PATTERNS = (
    # `.to(` / `device=` with an integer or an index-like name
    re.compile(rb"to(?<=\bto)" + BYTES_GAP + rb"\(" + BYTES_GAP + _INDEX_VALUE),
    re.compile(rb"device(?<=\bdevice)" + BYTES_GAP + rb"=" + BYTES_GAP + _INDEX_VALUE),
    # `device(<integer>` and an alias of it
    re.compile(rb"device(?<=\bdevice)" + BYTES_GAP + rb"\(" + BYTES_GAP + rb"(?:[(\-]" + BYTES_GAP + rb")*[0-9]"),
    re.compile(rb"device(?<=\bdevice)\s+as\b"),
    # evidence for any other name, and the calls whose result is an index
    *literal_patterns(use.needle for use in _INDEX_USES.values()),
    *literal_patterns([*(name.rsplit(".", 1)[-1] for name in _SOURCES), _LOCAL_RANK.pattern]),
)


#: Where `_INDEX_USES` read an index (a call's arguments are not tied together, so
#: `first` goes unchecked: that only lets more through).
_INDEX_SLOTS = tuple((use.call, use.position, use.keyword) for use in _INDEX_USES.values())
#: What `index_source` may find: a call of its functions, a LOCAL_RANK string.
_HAS_SOURCES = Uses(_SOURCES, calls_only=True) | String(_LOCAL_RANK)
#: `.to(i)` with an integer, an index-like name, or a name the file uses as an index.
_MOVES_TO_INDEX = Passes(call="to", position=0, keyword="device", integer=True, name=_INDEX_NAME,
                         name_also_at=_INDEX_SLOTS)
#: `device=` with the same (a value from `current_device()` and the like is a source).
_DEVICE_INDEX_KEYWORD = Passes(keyword="device", integer=True, name=_INDEX_NAME, name_also_at=_INDEX_SLOTS)
_BUILDS_A_DEVICE = Uses("torch.device", calls_only=True)
#: In the file: `torch.device(<integer>)`; `.to(i)` and `device=i` as above; an index
#: from `current_device()`, `% device_count()` or LOCAL_RANK.
_FILE_MAY_MATCH = ((_BUILDS_A_DEVICE & Passes(position=0, keyword="device", integer=True))
                   | _MOVES_TO_INDEX | _DEVICE_INDEX_KEYWORD | _HAS_SOURCES)
#: In a function or class: a name used as an index (evidence `_indices` must see); a
#: `.to(name)` / `device=name` where the file holds a source (the name may be assigned
#: an index in another unit); a device built; the moves above.
_UNIT_MAY_MATCH = AnyOf(tuple(Passes(*slot, name=ANY_NAME) for slot in _INDEX_SLOTS) + (
    _HAS_SOURCES, _DEVICE_INDEX_KEYWORD, InFile(_HAS_SOURCES) & (Calls("to") | Keyword("device")),
    _BUILDS_A_DEVICE, _MOVES_TO_INDEX))


class _DeviceIndexUses(cst.CSTVisitor):
    """Expressions the file itself uses as CUDA devices: `.cuda(x)`, `set_device(x)`,
    `torch.device("cuda", x)`, and names assigned a CUDA index (`index_source`). Any
    of these says `x` is a device, never a dtype."""

    def __init__(self, rule: Optional[Rule] = None) -> None:
        self.found: set[str] = set()
        self.rule = rule

    def visit_Assign(self, node: cst.Assign) -> None:
        if self.rule is not None and index_source(self.rule, node.value):
            self.found.update(filter(None, (dotted_name(t.target) for t in node.targets)))

    def visit_Call(self, node: cst.Call) -> None:
        method = callee_name(node.func)
        use = _INDEX_USES.get(method)
        if use is None:
            return
        if use.first is not None and (not node.args or string_value(node.args[0].value) != use.first):
            return
        arg = argument(node, use.keyword, use.position)
        name = dotted_name(arg.value) if arg is not None else None
        if name is not None:
            self.found.add(name)


class IntegerDeviceTo(Rule):
    """`.to(local_rank)`, `.to(0)` and `torch.device(0)` with a GPU index use the runtime's device.

    What:
    Rewrites `x.to(i)` / `x.to(device=i)` where `i` is an integer literal, or a name
    or attribute that holds a GPU index: one the file also passes to `.cuda(i)`,
    `torch.cuda.set_device(i)` or `torch.device("cuda", i)`, or one named like an
    index (`rank`, `local_rank`, `gpu`, `args.gpu`, `gpu_id`, `device_id`), or one
    the file assigns an index (`device = rank % torch.cuda.device_count()`,
    `gpu = int(os.environ["LOCAL_RANK"])`, `dev = torch.cuda.current_device()`).
    The call becomes `x.to(porter_runtime.device(i), ...)`, other arguments kept.
    The same goes for `device=i` of a torch function or class
    (`torch.zeros(n, device=local_rank)`) or of a tensor's `new_*` method
    (`x.new_zeros(n, device=i)`), and for `torch.cuda.current_device()` or
    porter's own `porter_runtime.current_device()` (0 off CUDA) passed as the device.
    `torch.device(0)` becomes `porter_runtime.device(0)`. A kwargs dict whose every
    use is `**kwargs` in such calls (`factory_kwargs = {"device":
    torch.cuda.current_device(), "dtype": dtype}`, `dict(device=local_rank, ...)`)
    gets its device ported where it is built.

    Why:
    An integer device means a CUDA index; without an accelerator `x.to(0)` and
    `torch.device(0)` raise `RuntimeError: Cannot access accelerator device when
    none is available.`

    Fix safety:
    Safe. On CUDA `porter_runtime.device(i)` is `torch.device("cuda", i)`, the
    device `x.to(i)` moves to; a value that is already a device (`"cuda:1"`, a
    `torch.device`) is returned as `torch.device` would make it.

    Known limits:
    `x.to(n)` with any other name is left alone: it may be a dtype or a tensor.
    The evidence is per file, not per scope.
    """

    code = "PT901"
    name = "integer-device"
    safety = Safety.SAFE
    needs = Needs(
        methods=frozenset({"to"}),
        targets=frozenset({"torch.device", "torch"}),  # "torch": `device=i` of any torch callable
        calls_only=True,
        byte_patterns=_BYTE_PATTERNS,
        evidence=_FILE_MAY_MATCH,
        unit=_UNIT_MAY_MATCH,
    )

    valid = [
        "x = x.to(dtype)\ny = y.to(other)\n",
        "pad = x.new_zeros(3, device=x.device)\nmine = build(device=torch.cuda.current_device())\n",
        "import mylib\nmylib.to(0)\n",
        "def f(torch):\n    return torch.device(0)\n",
        "import mylib as torch\ndev = torch.device(0)\n",
        "x = x.to(torch.float16)\n",
        # the dict is also logged: its int is what the log shows on CUDA
        "import torch\nmeta = {'device': torch.cuda.current_device()}\nlog(meta)\nx = torch.zeros(2, **meta)\n",
    ]
    invalid = [
        Example(
            "import torch\nmodel = model.to(0)\ndev = torch.device(1)\n",
            "import porter_runtime\nmodel = model.to(porter_runtime.device(0))\n"
            "dev = porter_runtime.device(1)\n",
        ),
        Example(
            "def train(local_rank, batch):\n    return batch.to(local_rank, non_blocking=True)\n",
            "import porter_runtime\ndef train(local_rank, batch):\n"
            "    return batch.to(porter_runtime.device(local_rank), non_blocking=True)\n",
        ),
        Example(
            "import torch as t\nt.cuda.set_device(args.which)\nmodel.to(args.which)\nx = x.to(device=args.gpu)\n",
            "import porter_runtime\nimport torch as t\nt.cuda.set_device(args.which)\n"
            "model.to(porter_runtime.device(args.which))\nx = x.to(device=porter_runtime.device(args.gpu))\n",
        ),
        Example(
            "from torch import device\ndev = device(0)\n",
            "import porter_runtime\ndev = porter_runtime.device(0)\n",
        ),
        Example(  # the evidence: `set_device` called by its own name
            "from torch.cuda import set_device\n\ndef main(which, x):\n    set_device(which)\n"
            "    return x.to(which)\n",
            "import porter_runtime\nfrom torch.cuda import set_device\n\ndef main(which, x):\n"
            "    set_device(which)\n    return x.to(porter_runtime.device(which))\n",
        ),
        Example(  # the evidence: a name assigned `rank % device_count()`, passed to `device=`
            "import torch\n\ndevice = rank % torch.cuda.device_count()\nmodel = Net().to(device)\n"
            "mask = torch.ones(4, device=device)\nlr = torch.tensor(0.1, dtype=dtype)\n",
            "import porter_runtime\nimport torch\n\ndevice = rank % torch.cuda.device_count()\n"
            "model = Net().to(porter_runtime.device(device))\n"
            "mask = torch.ones(4, device=porter_runtime.device(device))\nlr = torch.tensor(0.1, dtype=dtype)\n",
        ),
        Example(  # an index read from the launcher's environment; the current device
            "import os\nfrom torch import nn, zeros\n\ngpu = int(os.environ[\"LOCAL_RANK\"])\n"
            "head = nn.Linear(4, 4, device=gpu)\nbuf = zeros(2, device=local_rank)\n",
            "import porter_runtime\nimport os\nfrom torch import nn, zeros\n\ngpu = int(os.environ[\"LOCAL_RANK\"])\n"
            "head = nn.Linear(4, 4, device=porter_runtime.device(gpu))\n"
            "buf = zeros(2, device=porter_runtime.device(local_rank))\n",
        ),
        Example(  # porter's own twin is 0 off CUDA: `.to(0)` would need an accelerator
            "import porter_runtime\nloss = loss.to(porter_runtime.current_device())\n",
            "import porter_runtime\nloss = loss.to(porter_runtime.device(porter_runtime.current_device()))\n",
        ),
        Example(  # factory kwargs built once, splatted into every torch call (and only there)
            dedent("""\
            import torch
            from torch import nn


            class RotaryCache(nn.Module):
                def __init__(self, dim, max_len):
                    super().__init__()
                    factory_kwargs = {"device": torch.cuda.current_device(), "dtype": torch.float32}
                    inv_freq = 1.0 / (10000 ** (torch.arange(0, dim, 2, **factory_kwargs) / dim))
                    self.register_buffer("t", torch.arange(max_len, **factory_kwargs) * inv_freq[0])


            def scratch(local_rank):
                kwargs = dict(device=local_rank, dtype=torch.bfloat16)
                return torch.zeros(4, **kwargs)
            """),
            dedent("""\
            import porter_runtime
            import torch
            from torch import nn


            class RotaryCache(nn.Module):
                def __init__(self, dim, max_len):
                    super().__init__()
                    factory_kwargs = {"device": porter_runtime.device(torch.cuda.current_device()), "dtype": torch.float32}
                    inv_freq = 1.0 / (10000 ** (torch.arange(0, dim, 2, **factory_kwargs) / dim))
                    self.register_buffer("t", torch.arange(max_len, **factory_kwargs) * inv_freq[0])


            def scratch(local_rank):
                kwargs = dict(device=porter_runtime.device(local_rank), dtype=torch.bfloat16)
                return torch.zeros(4, **kwargs)
            """),
        ),
        Example(  # the current device as `device=` of a torch class and of a tensor's new_* method
            dedent("""\
            import torch
            from torch.cuda import current_device
            gen = torch.Generator(device=current_device())
            pad = x.new_zeros(3, device=torch.cuda.current_device())
            """),
            dedent("""\
            import porter_runtime
            import torch
            from torch.cuda import current_device
            gen = torch.Generator(device=porter_runtime.device(current_device()))
            pad = x.new_zeros(3, device=porter_runtime.device(torch.cuda.current_device()))
            """),
        ),
    ]

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self._found: Optional[set[str]] = None
        self._scopes: list[cst.CSTNode] = []

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        self._scopes.append(node)

    def leave_FunctionDef(self, original: cst.FunctionDef, updated: cst.FunctionDef) -> cst.FunctionDef:
        self._scopes.pop()
        return updated

    def leave_Assign(self, original: cst.Assign, updated: cst.Assign) -> cst.Assign:
        """``factory_kwargs = {"device": torch.cuda.current_device(), ...}`` (or ``dict(device=i, ...)``)
        whose every use is ``**factory_kwargs`` in a torch call: the device is ported as that
        call's ``device=`` would be."""
        if len(original.targets) != 1 or not isinstance(original.targets[0].target, cst.Name):
            return updated
        found = _factory_device(original.value, updated.value)
        if found is None:
            return updated
        old, new = found
        is_index = self._is_index(old) if isinstance(original.value, cst.Call) else index_source(self, old)
        if not is_index or not (new.deep_equals(old) or self._is_current_twin(new)):
            return updated
        scope = self._scopes[-1] if self._scopes else self.ctx.module
        if not self._only_splatted_into_torch(scope, original.targets[0].target.value):
            return updated
        value = _with_device(updated.value, new, self.runtime_call("device", new))
        return self.rewrite(original, updated.with_changes(value=value),
                            "an integer device is a CUDA index; it now resolves on this machine (every use "
                            "of these keyword arguments is a torch call's)")

    def _only_splatted_into_torch(self, scope: cst.CSTNode, name: str) -> bool:
        """Every read of ``name`` in ``scope`` is ``**name`` in a call of a torch function
        or class, or of a tensor's ``new_*`` method."""
        uses = _Splats(self, name)
        scope.visit(uses)
        return uses.splats > 0 and uses.splats == uses.reads

    @property
    def _indices(self) -> set[str]:
        """The names this file itself uses as CUDA devices: one extra look at the
        module's assignments and calls (porter.rulebase.walk), only when a `.to(name)` needs it."""
        if self._found is None:
            uses = _DeviceIndexUses(self)
            for node in nodes_of(self.ctx.module, (cst.Assign, cst.Call)):
                (uses.visit_Assign if isinstance(node, cst.Assign) else uses.visit_Call)(node)
            self._found = uses.found
        return self._found

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        if self.matches(original.func, "torch.device"):
            return self._torch_device(original, updated)
        func = original.func
        name = self.qualname(func)
        if name is not None and name.startswith("torch.") and not name.startswith("torch.cuda."):
            return self._device_keyword(original, updated)
        if isinstance(func, cst.Attribute) and func.attr.value in _TENSOR_FACTORIES and name is None:
            return self._device_keyword(original, updated)
        if not isinstance(func, cst.Attribute) or func.attr.value != "to" or self.qualname(func.value) is not None:
            return updated
        old, new = argument_pair(original, updated, "device", 0)
        if old is None or old.star or not self._is_index(old.value):
            return updated
        call = replace_arg(updated, new, self.runtime_call("device", new.value))
        return self.rewrite(original, call, "an integer device is a CUDA index; it now resolves on this machine")

    def _device_keyword(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        """`device=i` of a torch function or class (`torch.zeros(n, device=local_rank)`)
        or of a tensor's `new_*` method."""
        old, new = argument_pair(original, updated, "device")
        if old is None or not self._is_index(old.value):
            return updated
        # Unchanged by other rules, or only `torch.cuda.current_device()` made the twin.
        if not (new.value.deep_equals(old.value) or self._is_current_twin(new.value)):
            return updated
        call = replace_arg(updated, new, self.runtime_call("device", new.value))
        return self.rewrite(original, call, "an integer device is a CUDA index; it now resolves on this machine")

    def _torch_device(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        args = updated.args
        if not updated.func.deep_equals(original.func) or len(args) != 1 or args[0].keyword or args[0].star:
            return updated  # another rule replaced it, or not the one-integer form
        if int_value(args[0].value) is None:
            return updated
        return self.rewrite(original, self.runtime_call("device", args[0].value),
                            "an integer device is a CUDA index; it now resolves on this machine")

    def _is_current_twin(self, node: cst.BaseExpression) -> bool:
        """`porter_runtime.current_device()` as PT104 writes it (new nodes have no
        qualified names to match)."""
        return isinstance(node, cst.Call) and not node.args and node.func.deep_equals(self.runtime("current_device"))

    def _is_index(self, node: cst.BaseExpression) -> bool:
        if isinstance(node, cst.Integer) or (isinstance(node, cst.Call) and self.matches(node.func, *_CURRENT)):
            return True
        name = dotted_name(node)
        if name is None:
            return False
        return bool(_INDEX_NAME.match(name.rsplit(".", 1)[-1])) or name in self._indices


def _factory_device(original: cst.BaseExpression, updated: cst.BaseExpression):
    """(the original, the updated) value of a ``"device"`` entry of a dict display or
    ``device=`` of a ``dict(...)`` call, or None."""
    if isinstance(original, cst.Dict) and isinstance(updated, cst.Dict) and len(original.elements) == len(
            updated.elements):
        for old, new in zip(original.elements, updated.elements):
            if isinstance(old, cst.DictElement) and string_value(old.key) == "device":
                return old.value, new.value  # type: ignore[attr-defined]
        return None
    if (isinstance(original, cst.Call) and isinstance(original.func, cst.Name) and original.func.value == "dict"
            and isinstance(updated, cst.Call) and len(original.args) == len(updated.args)):
        for old, new in zip(original.args, updated.args):
            if old.keyword is not None and old.keyword.value == "device":
                return old.value, new.value
    return None


def _with_device(value: cst.BaseExpression, device: cst.BaseExpression, ported: cst.BaseExpression):
    if isinstance(value, cst.Dict):
        return value.with_changes(elements=[
            e.with_changes(value=ported) if isinstance(e, cst.DictElement) and e.value is device else e
            for e in value.elements])
    return value.with_changes(args=[a.with_changes(value=ported) if a.value is device else a
                                    for a in value.args])  # type: ignore[attr-defined]


class _Splats(cst.CSTVisitor):
    """How often a name is read, and how often as ``**name`` in a torch call."""

    def __init__(self, rule: Rule, name: str) -> None:
        self.rule, self.name = rule, name
        self.reads = self.splats = 0

    def visit_Name(self, node: cst.Name) -> None:
        if node.value == self.name:
            self.reads += 1

    def visit_Assign(self, node: cst.Assign) -> None:
        self.reads -= sum(1 for t in node.targets if isinstance(t.target, cst.Name) and t.target.value == self.name)

    def visit_Call(self, node: cst.Call) -> None:
        func = node.func
        qualname = self.rule.qualname(func)
        torch_call = (qualname is not None and qualname.startswith("torch.") and not qualname.startswith("torch.cuda.")
                      ) or (isinstance(func, cst.Attribute) and func.attr.value in _TENSOR_FACTORIES and qualname is None)
        for arg in node.args:
            if arg.star == "**" and isinstance(arg.value, cst.Name) and arg.value.value == self.name and torch_call:
                self.splats += 1
