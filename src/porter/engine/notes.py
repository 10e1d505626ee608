"""Findings in code that only runs where CUDA is become notes (severity "info").

A finding needs a human only with evidence that the code runs off CUDA (STYLE.md, house
rule 16). Code under a CUDA guard porter did not port (``if x.is_cuda:``, the CUDA arm of
``"nccl" if dist.is_nccl_available() else "gloo"``) and tests skipped off CUDA
(``@unittest.skipIf(not torch.cuda.is_available(), ...)``, ``@skip_if_lt_x_gpu(4)``) never
run on a Mac: what porter finds there is listed for information, as ruff lists a note,
and blocks nothing. The regions are porter.rulebase.guards'; ``try: import flash_attn``
bodies are not among them (the import's own finding is what a human must see).
"""

from __future__ import annotations

import dataclasses
from typing import Collection, Sequence

from porter.rulebase.guards import Region, cuda_regions, guard_ported, parse
from porter.rulebase.rule import INFO, Finding

_KINDS = ("device", "test")


def cuda_only_notes(findings: Sequence[Finding], data: bytes, keep: Collection[str] = ()) -> list[Finding]:
    """``findings`` with each one that needs a human, but lies in code only run where
    CUDA is, made a note that names the guard. ``keep``: the codes of the rules whose
    finding there is about the device split itself (``Rule.device_split``): they stay."""
    if not any(f.needs_human and f.code not in keep for f in findings):
        return list(findings)
    tree = parse(data)
    if tree is None:
        return list(findings)
    rewrites = [(f.line, f.column - 1) for f in findings if f.action == "rewrite"]
    regions = [r for r in cuda_regions(tree, data) if r.kind in _KINDS
               and not (r.kind == "device" and guard_ported(r, rewrites))]
    if not regions:
        return list(findings)
    return [_note(f, regions) if f.needs_human and f.code not in keep else f for f in findings]


def _note(finding: Finding, regions: Sequence[Region]) -> Finding:
    where = (finding.line, finding.column - 1)
    region = next((r for r in regions if r.contains(where)), None)
    if region is None:
        return finding
    why = "a test skipped off CUDA" if region.kind == "test" else "code run only where CUDA is"
    return dataclasses.replace(finding, severity=INFO,
                               message=f"{finding.message} (for information: {why}, line {region.guard_line})")
