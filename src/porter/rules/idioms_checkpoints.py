"""Checkpoints written by wrapped models (DataParallel / DDP `module.`, torch.compile
`_orig_mod.`) loaded into a model that is not wrapped on this machine."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from textwrap import dedent
from typing import Optional

import libcst as cst

from porter.rulebase.evidence import Uses
from porter.rulebase.rule import Example, Needs, Rule, Safety, string_value
from porter.rulebase.syntax import is_runtime_call

#: Receivers that are not models: their load_state_dict has other semantics, and the
#: runtime would only forward the call, so they are left as written.
_NOT_A_MODEL = re.compile(r"optim|sched|scaler|^opt$|sampler|loader|tokenizer|ema_?opt", re.I)

_COMPILE = frozenset({"torch.compile", "porter_runtime.compile"})
_PARALLEL = frozenset({
    "torch.nn.DataParallel", "torch.nn.parallel.DataParallel", "torch.nn.parallel.data_parallel.DataParallel",
    "torch.nn.parallel.DistributedDataParallel", "torch.nn.parallel.distributed.DistributedDataParallel",
})
#: Calls whose answer is the CUDA device count (or whether there is one), ported or not.
_GPU_COUNT = frozenset({"torch.cuda.device_count", "torch.cuda.is_available",
                        "porter_runtime.device_count", "porter_runtime.is_accelerator_available"})
#: What a file that already removes wrapper prefixes itself writes.
_PREFIX = re.compile(r"^(module|_orig_mod)\.?$")
_PREFIX_HELPERS = frozenset({"torch.nn.modules.utils.consume_prefix_in_state_dict_if_present"})


def _text(node: cst.CSTNode) -> str:
    return " ".join(cst.Module([]).code_for_node(node).split())


@dataclass
class _Wrap:
    kind: str  # "compile" | "parallel"
    conditional: bool
    tests: list[cst.BaseExpression]


@dataclass
class _Evidence:
    wraps: dict[str, list[_Wrap]] = field(default_factory=dict)
    saved: set[str] = field(default_factory=set)  # `X.state_dict()` is taken of these
    gpu_names: set[str] = field(default_factory=set)  # `n_gpu = torch.cuda.device_count()`
    #: X where the file saves both `X.module.state_dict()` and `X.state_dict()`
    unwrapped_saves: set[str] = field(default_factory=set)
    strips_prefixes: bool = False


class _EvidenceFinder(cst.CSTVisitor):
    """One pass over the original module gathering how its models are wrapped."""

    def __init__(self, rule: Rule) -> None:
        super().__init__()
        self.rule = rule
        self.found = _Evidence()
        self._tests: list[cst.BaseExpression] = []
        self._inner: set[str] = set()  # X of `X.module.state_dict()`
        self._whole: set[str] = set()  # X of `X.state_dict()`

    def visit_If(self, node: cst.If) -> None:
        self._tests.append(node.test)

    def leave_If(self, node: cst.If) -> None:
        self._tests.pop()

    def visit_Assign(self, node: cst.Assign) -> None:
        for target in node.targets:
            self._assigned(_text(target.target), node.value)

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        if node.value is not None:
            self._assigned(_text(node.target), node.value)

    def _assigned(self, target: str, value: cst.BaseExpression) -> None:
        conditional = bool(self._tests)
        if isinstance(value, cst.IfExp):
            value, conditional = (value.body if self._wrapper(value.body) else value.orelse), True
        kind = self._wrapper(value)
        if kind is not None:
            self.found.wraps.setdefault(target, []).append(_Wrap(kind, conditional, list(self._tests)))
        elif isinstance(value, cst.Call) and self.rule.qualname(value.func) in _GPU_COUNT:
            self.found.gpu_names.add(target)

    def _wrapper(self, value: cst.BaseExpression) -> Optional[str]:
        """"compile" or "parallel" for ``torch.compile(m)`` / ``DDP(m)``, also followed by
        ``.cuda()`` / ``.to(...)``."""
        while (isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute)
               and value.func.attr.value in ("cuda", "to")):
            value = value.func.value
        if not isinstance(value, cst.Call) or not value.args:
            return None
        name = self.rule.qualname(value.func)
        return "compile" if name in _COMPILE else "parallel" if name in _PARALLEL else None

    def leave_Module(self, node: cst.Module) -> None:
        self.found.unwrapped_saves = self._inner & self._whole

    def visit_Call(self, node: cst.Call) -> None:
        func = node.func
        if isinstance(func, cst.Attribute) and func.attr.value == "state_dict":
            self.found.saved.add(_text(func.value))
            owner = _moved_from(func.value)
            if isinstance(owner, cst.Attribute) and owner.attr.value == "module":
                self._inner.add(_text(owner.value))
            else:
                self._whole.add(_text(owner))
        elif self.rule.qualname(func) in _PREFIX_HELPERS:
            self.found.strips_prefixes = True

    def visit_SimpleString(self, node: cst.SimpleString) -> None:
        value = string_value(node)
        if value is not None and _PREFIX.match(value):
            self.found.strips_prefixes = True


def _moved_from(node: cst.BaseExpression) -> cst.BaseExpression:
    """``net`` for ``net.cpu()`` / ``net.to(...)`` / ``net.cuda()``: whose state is saved."""
    while (isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute)
           and node.func.attr.value in ("cpu", "cuda", "to")):
        node = node.func.value
    return node


class _Mentions(cst.CSTVisitor):
    def __init__(self, rule: Rule, names: set[str]) -> None:
        self.rule, self.names, self.found = rule, names, False

    def visit_Call(self, node: cst.Call) -> None:
        self.found = self.found or self.rule.qualname(node.func) in _GPU_COUNT

    def visit_Name(self, node: cst.Name) -> None:
        self.found = self.found or node.value in self.names

    def visit_Attribute(self, node: cst.Attribute) -> None:
        self.found = self.found or _text(node) in self.names


def _receiver_name(node: cst.BaseExpression) -> str:
    if isinstance(node, cst.Name):
        return node.value
    if isinstance(node, cst.Attribute):
        return node.attr.value
    if isinstance(node, cst.Subscript):
        return _receiver_name(node.value)
    return ""


#: A rewrite needs a wrapper in the file (`_may_get_prefixed_keys`): a call of
#: torch.compile, DataParallel or DDP, which also keeps the whole-file parse away from
#: the many files that only load a state dict.
_WRAPS_A_MODEL = Uses(_COMPILE | _PARALLEL, calls_only=True)


class WrappedCheckpoint(Rule):
    """`model.load_state_dict(sd)` → `porter_runtime.load_state_dict(model, sd)` where a wrapped checkpoint may reach it.

    What:
    Rewrites `model.load_state_dict(...)` into `porter_runtime.load_state_dict(model,
    ...)`, the arguments kept, only where the same file gives evidence that a
    checkpoint with wrapper-prefixed keys can reach an unwrapped model. The receiver
    (the same expression: `model`, `self.net`) is assigned in the file:
    - `torch.compile(...)`: porter runs the model eagerly off CUDA, so a checkpoint
      saved from the compiled model (keys `_orig_mod.`) meets a bare model on a Mac;
    - `DataParallel(...)` / `DistributedDataParallel(...)` inside an `if` that tests
      the CUDA device count or availability (`torch.cuda.device_count() > 1`, or a
      name assigned from it in the file, `n_gpu > 1`): the GPU box wraps (keys
      `module.`), a Mac with one device does not;
    - a wrapper inside any `if` (so some runs leave the model bare) while the file
      also takes the wrapped model's `state_dict()`: the file writes the prefixed
      checkpoint it may load into the bare model;
    - a file that saves both `net.module.state_dict()` and `net.state_dict()` (the
      inner model behind a GPU test, the wrapper itself otherwise, as CycleGAN-style
      `save_networks` do): where the test fails while `net` is still a DataParallel
      (a port off CUDA keeps it), the checkpoint carries `module.` keys that the
      file's own load into `net.module` meets.
    Everything else is left alone: an unconditional wrapper (the model is wrapped at
    load time on every device), optimizers and schedulers by their names, `super()`,
    `model.module.load_state_dict` (the author addresses the inner model), and every
    file that already removes prefixes itself (a `"module."` or `"_orig_mod."`
    string, or `consume_prefix_in_state_dict_if_present`).

    Why:
    Such a load fails off CUDA with `RuntimeError: Error(s) in loading state_dict ...
    Unexpected key(s) in state_dict: "module.conv1.weight"`, although the checkpoint
    is the right one.

    Fix safety:
    Safe. The runtime makes the original call with the original arguments and
    returns its result. Only when that call raises, the receiver is an
    `nn.Module`, and the failure is exactly explained by a wrapper prefix (every key
    has it, the model's keys don't, and without it the keys are the model's), does
    it load again with the prefix removed, warning once. Every call that works
    as written behaves identically, on CUDA and elsewhere.

    Known limits:
    Evidence is per file: a checkpoint written by a compiled model in train.py and
    loaded in eval.py is not rewritten (porter cannot prove where it came from), nor
    is a wrapper chosen in a helper function. `strict=False` calls never raise, so a
    prefixed checkpoint still loads nothing there, as before.
    """

    code = "PT905"
    name = "wrapped-checkpoint"
    safety = Safety.SAFE
    needs = Needs(
        methods=frozenset({"load_state_dict"}),
        whole_file=True,  # the evidence (wrappers, saves) lies anywhere in the module
        evidence=_WRAPS_A_MODEL,
    )

    valid = [
        dedent("""\
            optimizer.load_state_dict(ckpt['optimizer'])
            scheduler.load_state_dict(ckpt['sched'])
            """),
        dedent("""\
            import torch

            model = Net()
            model.load_state_dict(torch.load(path))
            """),
        dedent("""\
            import torch
            from torch.nn.parallel import DistributedDataParallel as DDP

            model = DDP(Net())
            model.load_state_dict(torch.load(path))
            """),
        dedent("""\
            import torch

            if torch.cuda.device_count() > 1:
                model = torch.nn.DataParallel(model)
            sd = {k.removeprefix("module."): v for k, v in torch.load(path).items()}
            model.load_state_dict(sd)
            """),
        dedent("""\
            import torch

            model = torch.compile(model)
            model.module.load_state_dict(sd)
            """),
        dedent("""\
            import mylib

            model = mylib.compile(model)
            mylib.load_state_dict(sd)
            model.load_state_dict(sd)
            """),
        dedent("""\
            class M(Base):
                def load_state_dict(self, sd, strict=True):
                    return super().load_state_dict(sd, strict)
            """),
        "import porter_runtime\nporter_runtime.load_state_dict(model, sd)\n",
        dedent("""\
            import torch
            net = torch.nn.DataParallel(net)
            torch.save(net.module.state_dict(), path)
            net.module.load_state_dict(torch.load(path))
            """),
    ]
    invalid = [
        Example(
            dedent("""\
                import torch

                model = torch.compile(model)
                ckpt = torch.load(path)
                model.load_state_dict(ckpt['state_dict'])
                optimizer.load_state_dict(ckpt['optimizer'])
                """),
            dedent("""\
                import porter_runtime
                import torch

                model = torch.compile(model)
                ckpt = torch.load(path)
                porter_runtime.load_state_dict(model, ckpt['state_dict'])
                optimizer.load_state_dict(ckpt['optimizer'])
                """),
            line=5, message="a DataParallel/DDP or compiled model",
        ),
        Example(
            dedent("""\
                import torch as t

                class Runner:
                    def restore(self, f):
                        return self.net.load_state_dict(t.load(f), strict=False)

                    def build(self):
                        from torch import compile
                        self.net = compile(self.net)
                """),
            dedent("""\
                import porter_runtime
                import torch as t

                class Runner:
                    def restore(self, f):
                        return porter_runtime.load_state_dict(self.net, t.load(f), strict=False)

                    def build(self):
                        from torch import compile
                        self.net = compile(self.net)
                """),
        ),
        Example(
            dedent("""\
                import torch

                n_gpu = torch.cuda.device_count()
                if n_gpu > 1:
                    model = torch.nn.DataParallel(model).cuda()
                model.load_state_dict(
                    torch.load(path),  # from the GPU box
                )
                """),
            dedent("""\
                import porter_runtime
                import torch

                n_gpu = torch.cuda.device_count()
                if n_gpu > 1:
                    model = torch.nn.DataParallel(model).cuda()
                porter_runtime.load_state_dict(
                    model,
                    torch.load(path),  # from the GPU box
                )
                """),
        ),
        Example(
            dedent("""\
                import torch

                class BaseModel:
                    def parallelize(self):
                        self.netG = torch.nn.DataParallel(self.netG, self.gpu_ids)

                    def save_networks(self, path):
                        net = self.netG
                        if len(self.gpu_ids) > 0 and torch.cuda.is_available():
                            torch.save(net.module.cpu().state_dict(), path)
                            net.cuda(self.gpu_ids[0])
                        else:
                            torch.save(net.cpu().state_dict(), path)

                    def load_networks(self, path):
                        net = self.netG
                        if isinstance(net, torch.nn.DataParallel):
                            net = net.module
                        net.load_state_dict(torch.load(path, map_location=str(self.device)))
                """),
            dedent("""\
                import porter_runtime
                import torch

                class BaseModel:
                    def parallelize(self):
                        self.netG = torch.nn.DataParallel(self.netG, self.gpu_ids)

                    def save_networks(self, path):
                        net = self.netG
                        if len(self.gpu_ids) > 0 and torch.cuda.is_available():
                            torch.save(net.module.cpu().state_dict(), path)
                            net.cuda(self.gpu_ids[0])
                        else:
                            torch.save(net.cpu().state_dict(), path)

                    def load_networks(self, path):
                        net = self.netG
                        if isinstance(net, torch.nn.DataParallel):
                            net = net.module
                        porter_runtime.load_state_dict(net, torch.load(path, map_location=str(self.device)))
                """),
        ),
        Example(
            dedent("""\
                import torch
                from torch.nn.parallel import DistributedDataParallel as DDP

                def main(args):
                    if args.distributed:
                        model = DDP(model)
                    if args.resume:
                        model.load_state_dict(torch.load(args.resume))
                    torch.save(model.state_dict(), "last.pt")
                """),
            dedent("""\
                import porter_runtime
                import torch
                from torch.nn.parallel import DistributedDataParallel as DDP

                def main(args):
                    if args.distributed:
                        model = DDP(model)
                    if args.resume:
                        porter_runtime.load_state_dict(model, torch.load(args.resume))
                    torch.save(model.state_dict(), "last.pt")
                """),
        ),
    ]

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self._evidence: Optional[_Evidence] = None

    @property
    def evidence(self) -> _Evidence:
        """What the file says about its wrappers: one extra pass, only when a
        candidate call needs it."""
        if self._evidence is None:
            finder = _EvidenceFinder(self)
            self.ctx.module.visit(finder)
            self._evidence = finder.found
        return self._evidence

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        func = original.func
        if not isinstance(func, cst.Attribute) or func.attr.value != "load_state_dict":
            return updated
        receiver = func.value
        if self.qualname(receiver) is not None or is_runtime_call(self, original):
            return updated  # a module's function, or already ported
        if isinstance(receiver, cst.Call) and isinstance(receiver.func, cst.Name) and receiver.func.value == "super":
            return updated
        if _NOT_A_MODEL.search(_receiver_name(receiver)) or _receiver_name(receiver) in ("module", "_orig_mod"):
            return updated
        if not self._may_get_prefixed_keys(_text(receiver)):
            return updated
        gap = updated.whitespace_before_args  # one argument a line stays so
        after = gap if isinstance(gap, cst.ParenthesizedWhitespace) else cst.SimpleWhitespace(" ")
        first = cst.Arg(updated.func.value, comma=cst.Comma(whitespace_after=after))  # type: ignore[attr-defined]
        new = updated.with_changes(func=self.runtime("load_state_dict"), args=[first, *updated.args])
        return self.rewrite(original, new, "a checkpoint of a DataParallel/DDP or compiled model now also loads "
                            "into the unwrapped model (only where the original call fails on the key prefix)")

    def _may_get_prefixed_keys(self, receiver: str) -> bool:
        """The file's evidence that a prefixed checkpoint can reach a bare ``receiver``."""
        found = self.evidence
        if found.strips_prefixes:
            return False
        if receiver in found.unwrapped_saves:
            return True
        for wrap in found.wraps.get(receiver, ()):
            if wrap.kind == "compile" or (wrap.conditional and receiver in found.saved):
                return True
            if wrap.conditional and any(self._gpu_test(test) for test in wrap.tests):
                return True
        return False

    def _gpu_test(self, test: cst.BaseExpression) -> bool:
        mentions = _Mentions(self, self.evidence.gpu_names)
        test.visit(mentions)
        return mentions.found
