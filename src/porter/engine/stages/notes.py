"""Findings in code that only runs where CUDA is become notes (severity "info").

A finding needs a human only with evidence that the code runs off CUDA (STYLE.md, house
rule 16). Code under a CUDA guard porter did not port (``if x.is_cuda:``, the CUDA arm of
``"nccl" if dist.is_nccl_available() else "gloo"``) and tests skipped off CUDA
(``@unittest.skipIf(not torch.cuda.is_available(), ...)``, ``@skip_if_lt_x_gpu(4)``) never
run on a Mac, nor does code run only with several GPUs (``if opts.num_gpus > 1:``, a Mac
has one): what porter finds there is listed for information, as ruff lists a note,
and blocks nothing. The regions are porter.rulebase.conditions.guards'; ``try: import flash_attn``
bodies are not among them (the import's own finding is what a human must see), but the
body of ``if SUPPORT_FA3:``, a flag such a ``try`` with a fallback sets, is. Code after
an import porter left as is in the same function or branch (``import tensorrt`` in a
TensorRT arm) is: porter.rulebase.conditions.import_tails.

One finding per construct: where a guard porter left as is carries a finding (PT202's
"left as is") and a finding of a device-split rule (``Rule.device_split``, PT602) sits in
the code that guard chooses, one of the two is a note. On the guard's own line the split's
finding says what to do, so the guard's is the note::

    Tensor = torch.cuda.FloatTensor if torch.cuda.is_available() else torch.Tensor  # PT602 stays

Through a flag set elsewhere, the flag's finding is the one to act on (port the flag and
every use of it follows), so the split's is the note::

    cuda = torch.cuda.is_available()                       # PT202 stays
    Tensor = torch.cuda.FloatTensor if cuda else torch.Tensor  # PT602: a note

A guard porter ported (``cuda = porter_runtime.is_accelerator_available()``) carries no
finding, so the split's stays: on a Mac it now picks the CUDA type.
"""

from __future__ import annotations

import ast
import dataclasses
from typing import Callable, Collection, Mapping, Optional, Sequence

from porter.rulebase.conditions.guards import Region, cuda_regions, guard_ported, parse, within
from porter.rulebase.conditions.import_tails import import_tails, top_level_cuda_import
from porter.rulebase.cuda_packages import is_cuda_only_module
from porter.rulebase.rule import INFO, Finding

_KINDS = ("device", "test", "gpus")


def cuda_only_notes(findings: Sequence[Finding], data: bytes, keep: Collection[str] = (),
                    restating: Collection[str] = (), never_runs: str = "",
                    cuda_module: Callable[[str], bool] = is_cuda_only_module,
                    ported: Optional[bytes] = None) -> list[Finding]:
    """``findings`` with each one that needs a human, but lies in code only run where
    CUDA is, made a note that names the guard. ``keep``: the codes of the rules whose
    finding there is about the device split itself (``Rule.device_split``): they stay.
    ``restating``: the codes of the rules whose finding only states a CUDA requirement
    (``Rule.restates_requirement``): a note where the module's top level imports a
    CUDA-only package porter left as is (that import's finding states it first).
    ``never_runs``: why the whole module never runs on a Mac (ProjectModel.never_runs_here), or "".
    ``cuda_module``: whether an import of a dotted name is of a CUDA-only package (not one
    the tree itself provides: Liger-Kernel imports ``liger_kernel``). ``ported``: the
    module as porter writes it (an import it removed was not left as is)."""
    if not any(f.needs_human for f in findings):
        return list(findings)
    if never_runs:
        return module_notes(findings, never_runs)
    tree = parse(data)
    if tree is None:
        return list(findings)
    rewrites = [(f.line, f.column - 1) for f in findings if f.action == "rewrite"]
    if restating:
        findings = _restated(findings, tree, {line for line, _ in rewrites}, restating, cuda_module,
                             None if ported is None or ported == data else parse(ported))
    tests = _if_lines(tree)
    regions = [r for r in cuda_regions(tree, data) if (r.kind in _KINDS or (r.kind == "import" and r.guard_line in tests))
               and not (r.kind == "device" and guard_ported(r, rewrites))]
    regions += import_tails(tree, {line for line, _ in rewrites})
    if not regions:
        return list(findings)
    findings = [_note(f, regions) if f.needs_human and f.code not in keep else f for f in findings]
    return _one_per_construct(findings, regions, keep)


def _if_lines(tree) -> set[int]:
    """The lines of the module's ``if`` statements and ternaries: an "import" region that
    hangs on one is the body of ``if SUPPORT_FA3:`` (a flag a ``try`` import with a
    fallback sets, or a probe), which runs only where that import succeeded (Open-Sora's
    FlashAttention-3 calls beside its FA2 ones); a ``try`` body's region hangs on the ``try``."""
    return {node.lineno for node in ast.walk(tree) if isinstance(node, (ast.If, ast.IfExp))}


def module_notes(findings: Sequence[Finding], never_runs: str) -> list[Finding]:
    """``findings`` with each one that needs a human made a note, where the whole module
    never runs on a Mac, for the reason ``never_runs`` says (ProjectModel.never_runs_here):
    the tree imports it only where CUDA is, nothing of the tree imports or runs it, or it
    is another accelerator's backend. "": ``findings`` as they are."""
    if not never_runs:
        return list(findings)
    return [dataclasses.replace(f, severity=INFO, message=f"{f.message} (for information: {never_runs})")
            if f.needs_human else f for f in findings]


def _restated(findings: Sequence[Finding], tree, rewritten: Collection[int], restating: Collection[str],
              cuda_module: Callable[[str], bool], ported=None) -> list[Finding]:
    """Each finding of a rule in ``restating`` made a note where the module's top level
    imports a CUDA-only package porter left as is: the module never imports off CUDA
    until that import's finding is acted on, and the requirement it restates goes with it
    (tinyllama's fused cross-entropy: ``import xentropy_cuda_lib``, then
    ``assert input.is_cuda`` in the loss that wraps it). One requirement, one finding:
    the first such import's own finding stays, and the module's later CUDA-only imports,
    its Triton kernels and its streams are notes (Liger-Kernel's CuTe DSL and cuTile
    modules, blind round 10: up to 20 findings each for one ``import cutlass``). Once a
    human guards that import, the next run finds no such import and they need a human again."""
    if not any(f.code in restating and f.needs_human for f in findings):
        return list(findings)
    line = top_level_cuda_import(tree, rewritten, cuda_module, ported)
    if line is None:
        return list(findings)
    return [restated(f, line) if f.code in restating and f.needs_human and f.line != line else f for f in findings]


def restated(finding: Finding, line: int) -> Finding:
    """``finding`` made a note: the module's CUDA-only import at ``line`` states it first."""
    return dataclasses.replace(finding, severity=INFO, message=f"{finding.message} (for information: the module "
                               f"already needs CUDA through its CUDA-only import at line {line}, whose finding "
                               f"comes first)")


def restated_touchpoints(extra: Sequence[Finding], data: bytes, rewritten: Collection[int],
                         cuda_module: Callable[[str], bool] = is_cuda_only_module,
                         ported: Optional[bytes] = None) -> list[Finding]:
    """The catch-all's findings (``extra``) made notes where the module's top level imports a
    CUDA-only package porter left as is (``_restated``), but the one on that import's line."""
    if not any(f.needs_human for f in extra):
        return list(extra)
    tree = parse(data)
    kept = None if ported is None or ported == data else parse(ported)
    line = None if tree is None else top_level_cuda_import(tree, rewritten, cuda_module, kept)
    if line is None:
        return list(extra)
    return [restated(f, line) if f.needs_human and f.line != line else f for f in extra]


def _one_per_construct(findings: Sequence[Finding], regions: Sequence[Region], keep: Collection[str]) -> list[Finding]:
    """A device split's finding and the finding on its unported guard made one (module docstring)."""
    guards = [f for f in findings if f.needs_human and f.code not in keep]
    splits = [f for f in findings if f.needs_human and f.code in keep]
    if not guards or not splits:
        return list(findings)
    notes: dict[int, Finding] = {}
    for split in splits:
        for region in regions:
            if region.kind != "device" or not region.contains((split.line, split.column - 1)):
                continue
            guard = next((g for g in guards if within(region.guard_spans, (g.line, g.column - 1))), None)
            if guard is None:
                continue
            if guard.line == split.line:
                notes[id(guard)] = _covered(guard, split)
            else:
                notes[id(split)] = _covered(split, guard)
            break
    return [notes.get(id(f), f) for f in findings]


def _covered(finding: Finding, by: Finding) -> Finding:
    return dataclasses.replace(finding, severity=INFO,
                               message=f"{finding.message} (for information: the same guard as {by.code} "
                                       f"at line {by.line})")


def _note(finding: Finding, regions: Sequence[Region]) -> Finding:
    where = (finding.line, finding.column - 1)
    region = next((r for r in regions if r.contains(where)), None)
    if region is None:
        return finding
    why = {"test": "a test skipped off CUDA", "gpus": "code run only with several GPUs",
           "import-tail": "code run only after a CUDA-only import porter left as is",
           "import": "code run only where its CUDA-only import succeeded"}.get(region.kind, "code run only where CUDA is")
    return dataclasses.replace(finding, severity=INFO,
                               message=f"{finding.message} (for information: {why}, line {region.guard_line})")


def one_per_setting(files: Sequence, codes: Collection[str]) -> None:
    """In ``files`` (a run's results, in path order), the findings of the rules in ``codes``
    (``Rule.repeated_setting``) that say the same thing in several files: the first stands
    for all and names how many files hold it, each other one becomes a note naming the
    first. torchtune's 196 configs that set ``device: cuda`` are one change in the code
    that reads the key, not 196."""
    if not codes:
        return
    holders: dict[tuple[str, str], list[str]] = {}
    for item in files:
        for finding in item.findings or ():
            if finding.code in codes and finding.needs_human:
                paths = holders.setdefault((finding.code, finding.message), [])
                if item.path not in paths:
                    paths.append(item.path)
    for item in files:
        if not item.findings:
            continue
        changed = []
        for finding in item.findings:
            paths = holders.get((finding.code, finding.message), []) if finding.needs_human else []
            if len(paths) > 1 and item.path != paths[0]:
                finding = dataclasses.replace(finding, severity=INFO, message=f"{finding.message} (for information: "
                                              f"the same setting as in {paths[0]}, whose finding stands for each file "
                                              "that holds it)")
            elif len(paths) > 1:
                finding = dataclasses.replace(finding, message=f"{finding.message} (and in {len(paths) - 1} more "
                                              f"file{'s' if len(paths) > 2 else ''}: one change where the code reads it "
                                              "covers them)")
            changed.append(finding)
        item.findings = changed


def opt_in_notes(findings: Sequence[Finding], data: bytes, options: Mapping[str, str]) -> list[Finding]:
    """``findings`` with each one that needs a human, but lies in the body of ``if
    args.use_8bit_adam:`` (alone or in an ``and``), made a note, where ``options`` (dest ->
    option: ProjectModel.opt_in_options) says no command of the tree turns that
    ``store_true`` option on: the code runs only for a user who asks for it."""
    if not options or not any(f.needs_human for f in findings):
        return list(findings)
    tree = parse(data) if any(dest.encode() in data for dest in options) else None
    if tree is None:
        return list(findings)
    blocks: list[tuple[int, int, int, str]] = []  # first and last line of a body, the `if` line, the option
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and node.body:
            dest = _opt_in_test(node.test, options)
            if dest is not None:
                blocks.append((node.body[0].lineno, node.body[-1].end_lineno or node.body[-1].lineno,
                               node.lineno, options[dest]))
    if not blocks:
        return list(findings)
    out = []
    for f in findings:
        block = next((b for b in blocks if b[0] <= f.line <= b[1]), None) if f.needs_human else None
        out.append(f if block is None else dataclasses.replace(
            f, severity=INFO, message=f"{f.message} (for information: code run only with `{block[3]}`, an option "
                                      f"that is off by default and that no command of the repository passes, "
                                      f"line {block[2]})"))
    return out


def _opt_in_test(test: ast.expr, options: Mapping[str, str]) -> Optional[str]:
    """The dest of ``args.<dest>`` when it is the test, or an operand of its ``and``."""
    operands = test.values if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And) else [test]
    return next((o.attr for o in operands if isinstance(o, ast.Attribute) and o.attr in options), None)
