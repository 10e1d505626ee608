"""What PT202 (porter.rules.cuda_available_guard) does with one ``torch.cuda.is_available()``
test of an ``if`` or a ternary: leave it (another rule's, or right on every device), note
it, report it, or rewrite it to ``porter_runtime.is_accelerator_available()``; and the
required ``elif`` that becomes its ``else``. The rule's visitor finds the tests; this
mixin decides, with the facts of porter.rulebase.families.availability.sides."""

from __future__ import annotations

from typing import Union

import libcst as cst

from porter.rulebase.families.thirdparty.kernel_builds import extension_build_stop
from porter.rulebase.matching import dotted_name

from porter.rulebase.conditions.availability_checks import (
    availability_test,
    else_requirement,
    else_stops,
    requirement,
)
from porter.rulebase.conditions.test_gates import is_test_path
from porter.rulebase.families.availability.choices import (
    accelerator_test,
    gated_choice,
    statement_choice,
    ternary_choice,
)
from porter.rulebase.families.availability.sides import (
    availability_calls,
    cuda_residue,
    falls_back_to_cpu,
    guard_calls,
    right_everywhere,
)

SUGGESTION = "porter_runtime.is_accelerator_available()"
NOTE = ("`torch.cuda.is_available()` is False without CUDA, so on a Mac this takes the "
        "CPU path even though MPS is there")


class GuardDecisions:
    """The visitor and the decisions of PT202, mixed into the rule (with AvailabilityRoles
    and Rule)."""

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self._elifs: set[int] = set()  # ids of the `elif` branches seen

    def visit_If(self, node: cst.If) -> None:
        if isinstance(node.orelse, cst.If):
            self._elifs.add(id(node.orelse))
        super().visit_If(node)

    def leave_If(self, original: cst.If, updated: cst.If) -> Union[cst.If, cst.Else]:
        if statement_choice(self, original) is not None:
            return updated
        found = else_requirement(self, original) if id(original) in self._elifs else None
        if found is not None and cuda_residue(self, original.body, updated.body) is None:
            return self._required(original, updated, found[0])
        return self._guard(original, updated, original.body, updated.body)

    def leave_IfExp(self, original: cst.IfExp, updated: cst.IfExp) -> cst.IfExp:
        if ternary_choice(self, original) is not None or gated_choice(self, original) is not None:
            return updated  # PT201's
        return self._guard(original, updated, original.body, updated.body)

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.Call:
        if original in self._handled or availability_test(self, original) is None:
            return updated
        role = self.availability_role(original)
        if role is not None:
            self.note(original, f"{NOTE}; {role}: for information", suggestion=SUGGESTION)
            return updated
        self._report(original, NOTE + "; if it means \"is there an accelerator\", use "
                  f"`{SUGGESTION}` (and `porter_runtime.device()` for the device)", suggestion=SUGGESTION)
        return updated

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

    def _guard(self, original, updated, body, new_body):
        test = original.test
        if isinstance(original, cst.If) and requirement(self, original) is not None:
            return updated  # PT903
        if isinstance(original, cst.If) and self._skips_distributed(original):
            return updated  # PT304
        if right_everywhere(self, original, guard_calls(self, test)):
            return updated
        role = next(filter(None, map(self.availability_role, availability_calls(self, test))), None)
        if role is not None:  # an early exit that shields a CUDA query (availability_roles)
            self.note(test, f"{NOTE}; {role}: for information", suggestion=SUGGESTION)
            return updated
        if availability_test(self, test) is False and isinstance(original, cst.If) and _skips_test(original.body):
            self.note(test, f"{NOTE}; a test skipped off CUDA: for information", suggestion=SUGGESTION)
            return updated
        if availability_test(self, test) is False and isinstance(original, cst.If) and original.orelse is None \
                and _only_messages(original.body):
            self.note(test, f"{NOTE}; the code it guards only composes a message (a demo's \"Running on CPU\" "
                      "banner), which a Mac also shows: for information", suggestion=f"if not {SUGGESTION}:")
            return updated
        if availability_test(self, test) is False:
            self._report(test, NOTE + "; code it guards now runs on a Mac",
                      suggestion=f"if not {SUGGESTION}:")
            return updated
        if not guard_calls(self, test):
            return updated
        if isinstance(original, cst.IfExp) and self._selects_cuda_type(original):
            self.flag(test, f"{NOTE}; the flag it sets chooses a legacy CUDA tensor type (`torch.cuda.FloatTensor "
                      "if cuda else torch.FloatTensor`), which exists only with CUDA, so it is not rewritten and "
                      "the code runs on the CPU off CUDA, as before",
                      suggestion="build tensors with torch.tensor(..., device=porter_runtime.device()) instead of "
                                 "the legacy types, then test porter_runtime.is_accelerator_available()")
            return updated
        index = self._device_index(original.body) if isinstance(original, cst.IfExp) else None
        if index is not None and falls_back_to_cpu(self, original):
            self.note(test, f"{NOTE}; the CUDA choice is a device index (`{index}`), which torch reads as a CUDA "
                      "device, so it is not rewritten and without CUDA it picks the CPU, which runs: for information",
                      suggestion="porter_runtime.device()")
            return updated
        residue = cuda_residue(self, body, new_body)
        if residue is not None and falls_back_to_cpu(self, original):
            self.note(test, f"{NOTE}; the CUDA choice (`{residue}`) is not rewritten, and without CUDA it picks "
                      "the CPU, which runs: for information", suggestion="porter_runtime.device()")
            return updated
        if residue is not None and isinstance(original, cst.If) and original.orelse is None \
                and _housekeeping_only(self, original.body):
            self.note(test, f"{NOTE}; the code it guards only releases or measures CUDA memory (`{residue}`), "
                      "so skipping it off CUDA changes no result: for information", suggestion=f"if {SUGGESTION}:")
            return updated
        if residue is not None and is_test_path(self.ctx.path):
            self.note(test, f"{NOTE}; a test's CUDA case (`{residue}`), which runs only where CUDA is, as the "
                      "test intends; its other cases run: for information", suggestion=f"if {SUGGESTION}:")
            return updated
        if residue is not None and extension_build_stop(self, original):
            return updated  # PT203 builds no extension in its else
        if residue is not None:
            self._report(test, f"{NOTE}; the code it guards still needs CUDA (`{residue}`), so it is not "
                      "rewritten; port the guarded code, then test the runtime", suggestion=f"if {SUGGESTION}:",
                         stops=isinstance(original, cst.If) and else_stops(self, original))
            return updated
        new_test = self.rewrite(original.test, accelerator_test(self, original.test, updated.test),
                                "the guard now also admits MPS and XPU")
        if new_test is original.test:
            return updated  # suppressed by a `# porter: ignore` comment
        return updated.with_changes(test=new_test)

    def _report(self, node: cst.CSTNode, message: str, *, suggestion: str, stops: bool = False) -> None:
        """A finding, or a note where the function (or module) asks for MPS itself, in
        test code (a test's CUDA gate or CUDA case: the suite skips it off CUDA, or runs
        it on the CPU), and in a module that builds CUDA kernels (the check decides what
        is compiled, which needs CUDA on every machine)."""
        if self._asks_for_mps():
            self.note(node, message + "; this code also asks `torch.backends.mps.is_available()`, so it picks "
                      "MPS on a Mac as written: for information", suggestion=suggestion)
        elif is_test_path(self.ctx.path):
            self.note(node, message + "; in test code, where it gates a test's CUDA case: off CUDA the suite "
                      "skips that case or runs it on the CPU, as it does on any machine without CUDA: for "
                      "information", suggestion=suggestion)
        elif builds_kernels(self.ctx) and stops:
            self.flag(node, "`torch.cuda.is_available()` picks the CUDA build in a module that builds CUDA "
                      "kernels, and its other branch stops the program: without CUDA (a Mac's too) the build stops here, "
                      "where no kernel can be compiled either way",
                      suggestion="off CUDA, build the CPU operators (CppExtension) or none, and let the code that "
                                 "imports them fall back")
        elif builds_kernels(self.ctx):
            self.note(node, message + "; in a module that builds CUDA kernels, where it decides what is "
                      "compiled or loaded, which needs CUDA on any machine, a Mac included: for information",
                      suggestion=suggestion)
        else:
            self.flag(node, message, suggestion=suggestion)

    def _device_index(self, arm: cst.BaseExpression):
        """The code of a ternary's CUDA arm that is a device index, not a device: OpenRLHF's
        ``torch.cuda.current_device() if torch.cuda.is_available() else "cpu"``, a local rank
        or an integer. Admitting MPS to it would hand ``torch.zeros(device=0)`` a CUDA index
        on a Mac, where the original took the CPU."""
        code = cst.Module([]).code_for_node(arm)
        if isinstance(arm, cst.Integer):
            return code
        if isinstance(arm, cst.Call) and (self.matches(arm.func, "torch.cuda.current_device") is not None
                                          or (isinstance(arm.func, cst.Name) and arm.func.value == "int")):
            return code
        if isinstance(arm, (cst.Name, cst.Attribute)):
            name = (arm.value if isinstance(arm, cst.Name) else arm.attr.value).lower()
            if "rank" in name or name in ("gpu", "gpu_id", "gpu_idx", "device_id", "device_index", "local_gpu"):
                return code
        return None


#: What a module that compiles or loads CUDA kernels names: ``setup.py`` of a
#: ``CUDAExtension``, a module that ``cpp_extension.load``s ``.cu`` sources.
_KERNEL_BUILD = (b"CUDAExtension", b"CUDA_HOME", b"cpp_extension")


def builds_kernels(ctx) -> bool:
    """Whether the file builds CUDA kernels: a ``setup.py``, or a module that names
    torch's extension builder (s4's and detectron2's ``setup.py``, xLSTM's ``cuda_init``)."""
    return ctx.path.rsplit("/", 1)[-1] == "setup.py" or any(token in ctx.source for token in _KERNEL_BUILD)


#: Calls that only release, collect or measure CUDA memory, or wait for the GPU: skipped,
#: nothing a program computes changes (ChatGLM-6B's ``torch_gc`` after each request).
_HOUSEKEEPING = frozenset({
    "torch.cuda.empty_cache", "torch.cuda.ipc_collect", "torch.cuda.synchronize", "torch.cuda.reset_peak_memory_stats",
    "torch.cuda.reset_max_memory_allocated", "torch.cuda.reset_max_memory_cached",
    "torch.cuda.reset_accumulated_memory_stats", "gc.collect",
})


def _housekeeping_only(rule, body: cst.BaseSuite) -> bool:
    """Whether a block makes only ``_HOUSEKEEPING`` calls (and ``pass``), directly or under
    ``with torch.cuda.device(...):``."""
    lines = body.body if isinstance(body, cst.IndentedBlock) else [body]
    if not lines:
        return False
    for line in lines:
        if isinstance(line, cst.With):
            if not all(isinstance(i.item, cst.Call) and rule.qualname(i.item.func) == "torch.cuda.device"
                       and i.asname is None for i in line.items) or not _housekeeping_only(rule, line.body):
                return False
            continue
        smalls = line.body if isinstance(line, (cst.SimpleStatementLine, cst.SimpleStatementSuite)) else None
        if not smalls:
            return False
        for small in smalls:
            if isinstance(small, cst.Pass):
                continue
            call = small.value if isinstance(small, cst.Expr) else None
            if not isinstance(call, cst.Call) or rule.qualname(call.func) not in _HOUSEKEEPING:
                return False
    return True


#: What skips the rest of a test: ``pytest.skip(...)``, ``self.skipTest(...)``,
#: ``raise unittest.SkipTest(...)``.
_SKIPS = frozenset({"pytest.skip", "self.skipTest", "unittest.SkipTest", "SkipTest", "pytest.skip.Exception"})


def _skips_test(body: cst.BaseSuite) -> bool:
    """Whether the block ends by skipping the test (Megatron-LM's ``if not
    torch.cuda.is_available(): pytest.skip("CUDA is required for NCCL allocator tests")``):
    the test never runs off CUDA, as with ``@pytest.mark.skipif``."""
    lines = body.body if isinstance(body, cst.IndentedBlock) else [body]
    last = lines[-1] if lines else None
    smalls = last.body if isinstance(last, cst.SimpleStatementLine) else []
    if not smalls:
        return False
    small = smalls[-1]
    call = small.value if isinstance(small, cst.Expr) else small.exc if isinstance(small, cst.Raise) else None
    func = call.func if isinstance(call, cst.Call) else call
    return func is not None and dotted_name(func) in _SKIPS



#: What a message is made of: string literals, f-strings and their concatenation.
_TEXT = (cst.SimpleString, cst.ConcatenatedString, cst.FormattedString)


def _only_messages(body: cst.BaseSuite) -> bool:
    """Whether a block only sets or extends names with text (gradio demos' ``if not
    torch.cuda.is_available(): DESCRIPTION += "<p>Running on CPU ...</p>"``): no device,
    model or option is chosen there."""
    lines = body.body if isinstance(body, cst.IndentedBlock) else [body]
    smalls = [s for line in lines for s in (line.body if isinstance(line, (cst.SimpleStatementLine,
                                                                             cst.SimpleStatementSuite)) else [None])]
    return bool(smalls) and all(isinstance(s, (cst.Assign, cst.AugAssign, cst.AnnAssign)) and _is_text(s.value)
                                for s in smalls)


def _is_text(node) -> bool:
    if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Add):
        return _is_text(node.left) and _is_text(node.right)
    return isinstance(node, _TEXT)
