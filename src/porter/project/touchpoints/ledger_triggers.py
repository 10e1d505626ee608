"""Which files can hold a CUDA touchpoint: a byte check before porter.project.touchpoints.ledger parses a file."""

from __future__ import annotations

import bisect
import re
from functools import lru_cache
from typing import Iterator

from porter.project.touchpoints.ledger_data import TreeContext
from porter.rulebase.codeview import code_view, prefilter_enabled
from porter.rulebase.cuda_packages import is_cuda_only_module

#: What a touchpoint looks like in bytes: the ledger parses only files with one of these
#: (or an import that may not resolve), and looks only at the statements on their lines.
_WORDS = re.compile(rb"cuda|CUDA|nccl|NCCL|device_ids|output_device")
#: The same words, each found at C speed (an alternation is tried at every position):
#: most files hold none, and ``_WORDS`` then need not run.
_WORD_LITERALS = (b"cuda", b"CUDA", b"nccl", b"NCCL", b"device_ids", b"output_device")
_TRIGGER = re.compile(rb"\.cuda\b|\bcuda\.|[\"']cuda\b|[\"']nccl\b|(?:CUDA|NCCL)_[A-Z_]+|is_cuda|CUDAExtension"
                      rb"|device_ids|output_device")
#: Names imported from torch.cuda or cpp_extension are used on lines that don't say so:
#: then every statement of the file is looked at.
_WHOLE_FILE = (
    re.compile(rb"from[ \t]+torch\.(?:cuda|utils\.cpp_extension)\b"),
    re.compile(rb"import[ \t]+torch\.(?:cuda|utils\.cpp_extension)[ \t]+as\b"),
    re.compile(rb"from[ \t]+torch(?:\.utils)?[ \t]+import[^\n]*\b(?:cuda|cpp_extension)\b"),
)
#: Import statements: ``from X import`` (X may be relative) or ``import a.b as c, d``;
#: each pattern starts with its keyword, so that it is searched for at C speed.
_FROM_IMPORT = re.compile(rb"from(?<=\bfrom)[ \t]+(\.*[\w.]*)[ \t]+import\b")
_PLAIN_IMPORT = re.compile(rb"import(?<=\bimport)[ \t]+([^\n#;]+)")


@lru_cache(maxsize=8192)
def _touches(context: TreeContext, root: bytes) -> bool:
    """Whether an import of ``root`` may be a touchpoint (CUDA-only, or resolving nowhere)."""
    name = root.decode("ascii", "replace")
    return bool(name) and not context.is_local(name) and (is_cuda_only_module(name) or not context.resolves(name))


def _import_roots(data: bytes) -> set[bytes]:
    roots = set()
    for module, names in _imports(data):
        if module:
            roots.add(module.split(b".")[0])
        else:
            for part in names.strip(b"()\\ \t\r").split(b","):
                words = part.split()
                if words:
                    roots.add(words[0].split(b".")[0])
    return roots


def _imports(data: bytes) -> Iterator[tuple[bytes, bytes]]:
    """(module of a ``from`` import, names of a plain import) of each import statement,
    left to right, no match inside an earlier one's text (``from x import`` is no
    plain import of the names after it)."""
    if b"import" not in data:
        return
    matches = sorted([*_FROM_IMPORT.finditer(data), *_PLAIN_IMPORT.finditer(data)], key=lambda m: m.start())
    end = 0
    for match in matches:
        if match.start() >= end:
            end = match.end()
            yield (match.group(1), b"") if match.re is _FROM_IMPORT else (b"", match.group(1))


def trigger_lines(data: bytes, context: TreeContext) -> list[int]:
    """The lines where ``data`` may hold a touchpoint, all of them when names from
    torch.cuda are imported (cheap: substring and regex searches in the bytes)."""
    offsets = []
    for hit in _WORDS.finditer(data) if any(w in data for w in _WORD_LITERALS) else ():
        start, end = data.rfind(b"\n", 0, hit.start()) + 1, data.find(b"\n", hit.end())
        if _TRIGGER.search(data, max(start, hit.start() - 2), end if end >= 0 else len(data)):
            offsets.append(hit.start())
    if offsets and any(p.search(data) for p in _WHOLE_FILE):
        return list(range(1, data.count(b"\n") + 2))
    wanted = [r for r in _import_roots(data) if _touches(context, r)]
    if wanted:
        pattern = re.compile(rb"\b(?:from|import)[ \t]+(?:[^\n#;]*[ \t,])?(?:" + b"|".join(
            re.escape(r) for r in wanted) + rb")\b")
        offsets += [m.start() for m in pattern.finditer(data)]
    if not offsets:
        return []
    newlines = [m.start() for m in _NEWLINE.finditer(data)]
    return sorted({bisect.bisect_left(newlines, o) + 1 for o in offsets})


_NEWLINE = re.compile(rb"\n")


def triggered_in_code(data: bytes, context: TreeContext) -> bool:
    """Whether a trigger is left once comments and prose strings are out
    (``porter.rulebase.codeview``): no touchpoint is ever in one, so the file needs no parse."""
    if not prefilter_enabled():
        return True
    code = code_view(data)
    return code is None or code is data or bool(trigger_lines(code, context))

