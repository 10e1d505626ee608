"""What each ``torch.cuda.is_available()`` call of a module is for, as PT202 walks it.

PT202 decides the calls that test an ``if`` or a ternary where it leaves them; the rest it
reports, unless the call plays a role that runs on a Mac as written: it sets a flag
nothing reads, a flag that only picks between names, a half-precision flag, it shields a
question about CUDA's own device, or it repeats CUDA entries (``(x,) * is_available()``).
``AvailabilityRoles`` is the visitor half of PT202 that records those roles (and the calls
other rules or other parts of PT202 decide); ``availability_role`` names a call's role.
It also answers what PT202 asks of the code around a guard: does the function ask for MPS
itself, does a flag pick a legacy CUDA tensor type.
"""

from __future__ import annotations

from typing import Optional

import libcst as cst

from porter.rulebase.conditions import dist_guard
from porter.rulebase.conditions.availability_checks import (
    availability_test,
    module_flags,
    only_required,
    requirement,
)
from porter.rulebase.conditions.cuda_query_guard import early_exit_shield, shielded_check
from porter.rulebase.conditions.name_choice import only_picks_names
from porter.rulebase.families.availability.sides import (
    MpsCheck,
    TypeFlags,
    and_chain,
    availability_calls,
    is_half_flag,
    unread_flag,
)
from porter.rulebase.rule import string_value

#: the role of a call -> what the note says of it (after "... even though MPS is there; "),
#: in the order a call with two roles is named by
_ROLES = {
    "unread": "the flag it sets is read nowhere, so it decides nothing",
    "required": "the flag it sets is read only by requirements (`if not flag: raise ...`), which porter ports to "
                "`porter_runtime.require_device`, met by the device the runtime resolves",
    "names": "here the flag it sets only picks between names (a package, a provider), and without CUDA the CPU "
             "one, which runs",
    "half": "here it only turns half precision on where CUDA is, so off CUDA float32 runs (a speed choice)",
    "shield": "here it only keeps a question about CUDA's own device (bf16 support, capability, properties) from "
              "being asked without CUDA; off CUDA the path the CPU takes runs",
    "repeat": "here it only repeats CUDA entries once or not at all, so off CUDA they are left out and the rest runs",
}


class AvailabilityRoles:
    """Mixed into PT202 (a ``Rule``): records, while visiting, which availability calls are
    decided elsewhere (``_handled``) and which play a role that runs on a Mac."""

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self._handled: set[cst.Call] = set()  # calls decided at their if/ternary
        self._dist_guards: Optional[set[int]] = None
        self._functions: list[cst.FunctionDef] = []
        self._roles: dict[str, set[cst.BaseExpression]] = {role: set() for role in _ROLES}
        self._flags: dict[int, str] = {}  # id of a ternary -> the name it is assigned to
        self._type_flags: Optional[set[str]] = None
        self._mps_scopes: dict[int, bool] = {}

    def availability_role(self, call: cst.Call) -> Optional[str]:
        """What the note says of ``call``'s role, or None: a call to report."""
        return next((text for role, text in _ROLES.items() if call in self._roles[role]), None)

    def _play(self, role: str, calls) -> None:
        self._roles[role].update(calls)

    def visit_If(self, node: cst.If) -> None:
        self._handled.update(availability_calls(self, node.test))  # decided in leave_If (or by PT201)
        if self._skips_distributed(node):  # PT304's, also once ported
            self._handled.update(dist_guard.negated_availability(self, n) or n.left.expression
                                 for n, _ in dist_guard.guard_operands(self, node.test))

    def _skips_distributed(self, node: cst.If) -> bool:
        if self._dist_guards is None:
            self._dist_guards = dist_guard.distributed_guards(self)
        return id(node) in self._dist_guards

    def visit_IfExp(self, node: cst.IfExp) -> None:
        self._handled.update(availability_calls(self, node.test))

    def visit_Assert(self, node: cst.Assert) -> None:
        if requirement(self, node) is not None:
            self._handled.update(availability_calls(self, node.test))  # PT903

    def visit_Call(self, node: cst.Call) -> None:
        if isinstance(node.func, cst.Name) and node.func.value == "print" and self.qualname(node.func) is None:
            for arg in node.args:  # only reported
                self._handled.update(availability_calls(self, arg.value))

    def visit_Assign(self, node: cst.Assign) -> None:
        if isinstance(node.value, cst.IfExp) and len(node.targets) == 1 and isinstance(node.targets[0].target, cst.Name):
            self._flags[id(node.value)] = node.targets[0].target.value
        if len(node.targets) == 1 and availability_test(self, node.value) and unread_flag(self, node.targets[0].target):
            self._play("unread", [node.value])
        if self._required_flag(node):
            self._play("required", [node.value])
        if len(node.targets) == 1 and is_half_flag(node.targets[0].target) and and_chain(node.value):
            self._play("half", [c for c in availability_calls(self, node.value) if availability_test(self, c)])
        target = node.targets[0].target if len(node.targets) == 1 else None
        if isinstance(target, cst.Name) and self._functions and and_chain(node.value):
            # the availability calls first: the walk of the whole function is for their flags only
            calls = [c for c in availability_calls(self, node.value) if availability_test(self, c)]
            if calls and only_picks_names(self._functions[-1], target.value):
                self._play("names", calls)

    def _required_flag(self, node: cst.Assign) -> bool:
        """``HAS_CUDA = torch.cuda.is_available()``, the module's flag, that only
        requirements read here and no other module imports."""
        target = node.targets[0].target if len(node.targets) == 1 else None
        if not isinstance(target, cst.Name) or self._functions or target.value not in module_flags(self):
            return False
        project = self.ctx.project
        return only_required(self, target.value) and (project is None or not project.read_elsewhere(self.ctx.path, target.value))

    def visit_BooleanOperation(self, node: cst.BooleanOperation) -> None:
        shielded = shielded_check(self, node)  # porter.rulebase.conditions.cuda_query_guard
        if shielded is not None:
            self._play("shield", [shielded])

    def visit_IndentedBlock(self, node: cst.IndentedBlock) -> None:
        for statement, following in zip(node.body, node.body[1:]):
            if isinstance(statement, cst.If):
                self._play("shield", early_exit_shield(self, statement, following))

    def visit_BinaryOperation(self, node: cst.BinaryOperation) -> None:
        if isinstance(node.operator, cst.Multiply):  # `(torch.device("cuda"),) * is_available()`
            self._play("repeat", [side for side in (node.left, node.right) if availability_test(self, side)])

    def visit_Arg(self, node: cst.Arg) -> None:
        if node.keyword is not None and node.keyword.value == "pin_memory":
            self._handled.update(availability_calls(self, node.value))  # PT401

    def visit_FormattedStringExpression(self, node: cst.FormattedStringExpression) -> None:
        self._handled.update(availability_calls(self, node.expression))  # only reported, as in a log line

    def visit_DictElement(self, node: cst.DictElement) -> None:
        if string_value(node.key) == "pin_memory":
            self._handled.update(availability_calls(self, node.value))  # PT401

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        self._functions.append(node)

    def leave_FunctionDef(self, original: cst.FunctionDef, updated: cst.FunctionDef) -> cst.FunctionDef:
        self._functions.pop()
        return updated

    def _asks_for_mps(self) -> bool:
        """Whether the enclosing function (or the module) calls ``torch.backends.mps.is_available()``:
        a device choice of its own with an MPS branch (yolov5's select_device, an example's
        ``use_mps = args.mps and torch.backends.mps.is_available()``)."""
        scope = self._functions[-1] if self._functions else self.ctx.module
        if id(scope) not in self._mps_scopes:
            finder = MpsCheck(self, scope)
            scope.visit(finder)
            self._mps_scopes[id(scope)] = finder.found
        return self._mps_scopes[id(scope)]

    def _selects_cuda_type(self, node: cst.IfExp) -> bool:
        """``cuda = True if torch.cuda.is_available() else False`` whose name the file tests to
        pick ``torch.cuda.FloatTensor``: admitting MPS would make it pick that type on a Mac,
        where it raises; and ``x.type(Tensor)`` can name no MPS type."""
        name = self._flags.get(id(node))
        if name is None:
            return False
        if self._type_flags is None:
            finder = TypeFlags(self)
            self.ctx.module.visit(finder)
            self._type_flags = finder.names
        return name in self._type_flags
