"""``torch.load`` of checkpoints saved on CUDA."""

from __future__ import annotations

from typing import Optional

import libcst as cst

from porter.project.query import Scoped
from porter.rulebase.rule import Example, Needs, Rule, Safety, cuda_spec, positional
from porter.rulebase.syntax import is_device_expr, with_arg

_LOADERS = frozenset({"torch.load", "torch.serialization.load", "torch.jit.load"})


def _calls_cuda(node: cst.Lambda) -> bool:
    found = []

    class Finder(cst.CSTVisitor):
        def visit_Attribute(self, attr: cst.Attribute) -> None:
            if attr.attr.value == "cuda":
                found.append(attr)

    node.body.visit(Finder())
    return bool(found)


def _lambda_location(node: cst.Lambda) -> Optional[str]:
    """``"cuda"`` for ``lambda s, loc: s.cuda()``, ``"cuda:1"`` for ``s.cuda(1)``."""
    params = node.params.params
    body = node.body
    if len(params) != 2 or node.params.star_arg is not cst.MaybeSentinel.DEFAULT:
        return None
    if not isinstance(body, cst.Call) or not isinstance(body.func, cst.Attribute):
        return None
    receiver = body.func.value
    if body.func.attr.value != "cuda" or not isinstance(receiver, cst.Name) or receiver.value != params[0].name.value:
        return None
    if not body.args:
        return "cuda"
    only = body.args[0]
    if len(body.args) == 1 and only.keyword is None and isinstance(only.value, cst.Integer):
        return f"cuda:{only.value.value}"
    return None


def _lambda_index(node: cst.Lambda) -> Optional[cst.BaseExpression]:
    """``rank`` of ``lambda s, loc: s.cuda(rank)`` (one argument that is not a parameter)."""
    body = node.body
    if _lambda_location(node) is not None or not isinstance(body, cst.Call) or len(body.args) != 1:
        return None
    params = node.params.params
    if len(params) != 2 or node.params.star_arg is not cst.MaybeSentinel.DEFAULT:
        return None
    func, only = body.func, body.args[0]
    if not isinstance(func, cst.Attribute) or func.attr.value != "cuda" or only.keyword is not None or only.star:
        return None
    if not isinstance(func.value, cst.Name) or func.value.value != params[0].name.value:
        return None
    used = {n.value for n in _names(only.value)}
    return None if used & {p.name.value for p in params} else only.value


def _names(node: cst.CSTNode) -> list[cst.Name]:
    found: list[cst.Name] = []

    class Finder(cst.CSTVisitor):
        def visit_Name(self, name: cst.Name) -> None:
            found.append(name)

    node.visit(Finder())
    return found


def _device_literal(rule: Rule, node: cst.BaseExpression) -> Optional[cst.BaseExpression]:
    """The string of ``torch.device("cuda:1")`` (one literal argument), else None."""
    if not isinstance(node, cst.Call) or len(node.args) != 1 or node.args[0].keyword is not None:
        return None
    if rule.qualname(node.func) != "torch.device" or cuda_spec(node.args[0].value) is None:
        return None
    return node.args[0].value


class TorchLoadMapLocation(Scoped, Rule):
    """`torch.load` gets `map_location=porter_runtime.map_location(...)`.

    What:
    Adds `map_location=porter_runtime.map_location()` to `torch.load(...)` and
    `torch.jit.load(...)` calls that have none (or pass `None`), and wraps a CUDA
    location: `map_location="cuda:0"` becomes `porter_runtime.map_location("cuda:0")`,
    `torch.device("cuda:1")` becomes `porter_runtime.map_location("cuda:1")`, and
    `torch.device("cuda", i)` / `porter_runtime.device(i)` are wrapped.
    `lambda storage, loc: storage.cuda()` (or `.cuda(1)`) becomes
    `porter_runtime.map_location("cuda")` (or `"cuda:1"`), and
    `lambda s, loc: s.cuda(gpu)` becomes
    `porter_runtime.map_location(porter_runtime.device(gpu))`; other lambdas that
    call `.cuda` are reported.

    Why:
    A checkpoint saved on CUDA fails to load without CUDA: `RuntimeError: Attempting
    to deserialize object on a CUDA device but torch.cuda.is_available() is False.`
    Mapping it straight to MPS fails for float64 storages
    (`Cannot convert a MPS Tensor to float64 dtype`), and `map_location` can't see
    a storage's dtype.

    Fix safety:
    Safe. On CUDA `porter_runtime.map_location(requested)` returns `requested`
    unchanged (None when there was none), so `torch.load` gets exactly its old
    argument. Elsewhere CUDA locations become the CPU on a Mac (then
    `load_state_dict` / `.to(device)` copy to MPS, casting as the model needs) and
    the resolved device otherwise. `lambda s, loc: s.cuda()` and the location
    "cuda" both restore every storage, whatever its saved location, to the current
    CUDA device (`.cuda(1)` and "cuda:1" to device 1, `.cuda(gpu)` and
    `torch.device("cuda", gpu)` to device `gpu`) with the same data; torch merely
    skips a host copy for the location.

    A call with `**kwargs` and no visible `map_location` gets the location as the
    first key of the unpacked dict, `**{"map_location": porter_runtime.map_location(),
    **kwargs}`: a `map_location` in `kwargs` still wins, and on CUDA the added one is
    None, torch's default (InternLM's `tools/convert2llama.py`, blind round 18).

    Known limits:
    A location held in a variable (`map_location=device`) or a dict is left alone.
    A call that also unpacks positional arguments (`*args`, which may hold the
    location) is reported; in a module-level wrapper whose every call in the tree
    passes `map_location` (porter.project.loaders) a `**kwargs` call is a note, since
    the callers map the checkpoint:

        # dist_util.py: a note, as every caller names a location
        def load_state_dict(path, **kwargs):
            data = read_on_rank_zero(path)
            return th.load(io.BytesIO(data), **kwargs)

        # train_util.py: each location ported here (PT601 rewrites "cuda" ones)
        model.load_state_dict(dist_util.load_state_dict(path, map_location="cpu"))

    One call without `map_location` (`dist_util.load_state_dict(path)`), or the
    wrapper handed on as a value, keeps the finding.
    """

    code = "PT601"
    name = "torch-load-map-location"
    safety = Safety.SAFE
    needs = Needs(calls_only=True, targets=_LOADERS)

    valid = [
        "import torch\nstate = torch.load(path, map_location='cpu')\n",
        "import torch\nstate = torch.load(path, map_location=device)\n",
        "import torch\nstate = torch.load(path, 'cpu', weights_only=True)\n",
        "def f(torch, path):\n    return torch.load(path)\n",
        "import pickle as torch\nstate = torch.load(f)\n",
        "import torch\nstate = torch.load(path, map_location=lambda storage, loc: storage)\n",
    ]
    invalid = [
        Example(
            "import torch\nstate = torch.load(path)\n",
            "import porter_runtime\nimport torch\nstate = torch.load(path, map_location=porter_runtime.map_location())\n",
        ),
        Example(
            "import torch as t\nstate = t.load(path, map_location=\"cuda:0\", weights_only=True)\n",
            "import porter_runtime\nimport torch as t\n"
            "state = t.load(path, map_location=porter_runtime.map_location(\"cuda:0\"), weights_only=True)\n",
        ),
        Example(
            "from torch import load\nstate = load(\n    path,\n    weights_only=False,\n)\n",
            "import porter_runtime\nfrom torch import load\nstate = load(\n    path,\n    weights_only=False,\n"
            "    map_location=porter_runtime.map_location(),\n)\n",
        ),
        Example(
            "import torch\nckpt = torch.load(path, None)\nmodel = torch.jit.load(f, map_location=torch.device('cuda'))\n",
            "import porter_runtime\nimport torch\nckpt = torch.load(path, porter_runtime.map_location())\n"
            "model = torch.jit.load(f, map_location=porter_runtime.map_location('cuda'))\n",
        ),
        Example(
            "import torch\nstate = torch.load(path, map_location=lambda storage, loc: storage.cuda(1))\n",
            "import porter_runtime\nimport torch\nstate = torch.load(path, map_location=porter_runtime.map_location(\"cuda:1\"))\n",
        ),
        Example(
            "import torch\nstate = torch.load(path, map_location=lambda s, loc: s.cuda(args.gpu))\n",
            "import porter_runtime\nimport torch\n"
            "state = torch.load(path, map_location=porter_runtime.map_location(porter_runtime.device(args.gpu)))\n",
        ),
        Example("import torch\nstate = torch.load(path, map_location=lambda s, loc: s.cuda(int(loc[-1])))\n"),
        Example(  # InternLM's tools/convert2llama.py
            "import torch\n\n\ndef weight_load(fp, **kwargs):\n    return torch.load(fp, **kwargs)\n",
            "import porter_runtime\nimport torch\n\n\ndef weight_load(fp, **kwargs):\n"
            "    return torch.load(fp, **{\"map_location\": porter_runtime.map_location(), **kwargs})\n",
        ),
        Example("import torch\nstate = torch.load(path, *load_args)\n"),
    ]

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        if not self.matches(original.func):
            return updated
        index = self._location_index(original)
        if index is None:
            if any(a.star for a in original.args):
                return self._unpacked(original, updated)
            new_arg = cst.Arg(self.runtime_call("map_location"), keyword=cst.Name("map_location"), equal=_EQ)
            return self.rewrite(original, with_arg(updated, new_arg), _MESSAGE)
        value = self._new_location(original.args[index].value, updated.args[index].value)
        if value is None:
            return updated
        args = list(updated.args)
        args[index] = args[index].with_changes(value=value)
        return self.rewrite(original, updated.with_changes(args=args), _MESSAGE)

    def _unpacked(self, call: cst.Call, updated: cst.Call) -> cst.Call:
        message = "torch.load with unpacked arguments: a CUDA checkpoint needs a map_location off CUDA"
        scope = self.scope[1].split(".")
        project = self.ctx.project
        if project is not None and len(scope) == 1 and (self.ctx.path, scope[0]) in project.mapped_wrappers:
            self.note(call, f"{message} (for information: every call of `{scope[0]}` in the tree passes map_location)")
            return updated
        if any(a.star == "**" and _names_location(a.value) for a in call.args):
            return updated  # `**{"map_location": ..., **kwargs}`: mapped here (a second run)
        stars = [a.star for a in call.args if a.star]
        if stars != ["**"]:
            self.flag(call, message, suggestion="map_location=porter_runtime.map_location()")
            return updated
        # the location first, the caller's keywords after it: theirs wins where it is given
        at = next(i for i, a in enumerate(updated.args) if a.star == "**")
        merged = cst.Dict([cst.DictElement(cst.SimpleString('"map_location"'), self.runtime_call("map_location")),
                           cst.StarredDictElement(updated.args[at].value)])
        args = list(updated.args)
        args[at] = args[at].with_changes(value=merged)
        return self.rewrite(call, updated.with_changes(args=args), _MESSAGE)

    @staticmethod
    def _location_index(call: cst.Call) -> Optional[int]:
        for index, arg in enumerate(call.args):
            if arg.keyword is not None and arg.keyword.value == "map_location":
                return index
        given = positional(call)
        if len(given) > 1 and not any(a.star for a in call.args[: call.args.index(given[1])]):
            return call.args.index(given[1])
        return None

    def _new_location(self, original: cst.BaseExpression, updated: cst.BaseExpression) -> Optional[cst.BaseExpression]:
        if isinstance(original, cst.Name) and original.value == "None":
            return self.runtime_call("map_location")
        if cuda_spec(original) is not None:
            return self.runtime_call("map_location", updated)
        literal = _device_literal(self, original)
        if literal is not None:
            # torch.load and torch.jit.load treat torch.device("cuda:1") as "cuda:1".
            return self.runtime_call("map_location", literal)
        if is_device_expr(self, original) or (isinstance(updated, cst.Call)
                                               and updated.func.deep_equals(self.runtime("device"))):
            # ``updated``: torch.device(...) may already be the runtime's device (PT002, or
            # the device flow's ``torch.device(location)`` for a location callers pass as
            # "cuda": ControlNet's load_state_dict, whose second --write wrapped it).
            return self.runtime_call("map_location", updated)
        if isinstance(original, cst.Lambda):
            return self._lambda(original, updated)
        return None


    def _lambda(self, original: cst.Lambda, updated: cst.BaseExpression) -> Optional[cst.BaseExpression]:
        location = _lambda_location(original)
        if location is not None:
            return self.runtime_call("map_location", cst.SimpleString(f'"{location}"'))
        index = _lambda_index(original)
        if index is not None:
            index = self._updated_index(updated) or index
            # ``s.cuda(i)`` and the location ``torch.device("cuda", i)`` restore alike.
            return self.runtime_call("map_location", self.runtime_call("device", index))
        if _calls_cuda(original):
            self.flag(original, "a map_location that calls `.cuda()` fails without CUDA",
                      suggestion='map_location=porter_runtime.map_location("cuda")')
        return None


    def _updated_index(self, updated: cst.BaseExpression) -> Optional[cst.BaseExpression]:
        """The index of ``lambda s, loc: s.cuda(i)`` as other rules left it: PT104 makes
        `torch.cuda.current_device()` the runtime's twin, and the `.cuda(i)` rule writes
        `s.to(porter_runtime.device(i))`. Taking it from the original would undo both."""
        body = updated.body if isinstance(updated, cst.Lambda) else None
        if not isinstance(body, cst.Call) or len(body.args) != 1 or not isinstance(body.func, cst.Attribute):
            return None
        value = body.args[0].value
        if body.func.attr.value == "cuda":
            return value
        moved = isinstance(value, cst.Call) and len(value.args) == 1 and value.func.deep_equals(self.runtime("device"))
        return value.args[0].value if moved and body.func.attr.value == "to" else None


def _names_location(value: cst.BaseExpression) -> bool:
    """Whether an unpacked dict display names ``map_location`` itself."""
    return isinstance(value, cst.Dict) and any(
        isinstance(e, cst.DictElement) and isinstance(e.key, cst.SimpleString)
        and e.key.evaluated_value == "map_location" for e in value.elements)


_MESSAGE = "a CUDA checkpoint now loads where the runtime's device can take it"
_EQ = cst.AssignEqual(whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace(""))
