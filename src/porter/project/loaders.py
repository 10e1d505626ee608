"""``torch.load`` wrappers whose every caller passes ``map_location``.

guided-diffusion's ``dist_util.load_state_dict(path, **kwargs)`` ends in
``th.load(io.BytesIO(data), **kwargs)``: PT601 can't add a ``map_location`` there (one may
come in ``kwargs``), so it reports the call. Where every call of the wrapper in the tree
names ``map_location`` (``dist_util.load_state_dict(path, map_location="cpu")``), the
checkpoint is mapped by its callers (PT601 ports each of their locations) and the
wrapper's call is a note. A wrapper called once without it, or handed on as a value
(``loader = load_state_dict``), stays a finding.

Only module-level functions count; every bare call of the name counts (a same-named
function elsewhere can only keep the finding), and calls through the module's name
(``dist_util.load_state_dict``):
another object's ``.load_state_dict(...)`` (torch's ``Module.load_state_dict``) is
another function. Byte searches over every source, as the project model's other facts;
only files defining such a wrapper are parsed.
"""

from __future__ import annotations

import ast
import re
from typing import Iterator, Mapping, Optional

from porter.rulebase.conditions.guards import parse_uncached

#: ``def name(..., **kwargs`` at the start of a line: a module-level function taking ``**``.
_DEF = re.compile(rb"^def[ \t]+(\w+)[ \t]*\([^)]*\*\*", re.M)
_MAP_LOCATION = re.compile(rb"\bmap_location[ \t]*=")
#: ``load`` and what may follow it in a call of it: ``(``, a comment or ``)`` (``(torch.load)(``).
_LOAD = re.compile(rb"load[ \t\r\n\f\\]*([(#)])")


def mapped_wrappers(sources: Mapping[str, bytes], modules: Mapping[str, str]) -> frozenset[tuple[str, str]]:
    """(file, function) for each module-level function that hands its ``**kwargs`` to a
    ``*.load(...)`` and whose every call in the tree passes ``map_location=``."""
    found = set()
    for rel, data in sources.items():
        if b"load(" not in data or not _DEF.search(data) or not _may_forward(data):
            continue
        for name in _forwarding_loaders(data):
            if _all_calls_map(sources, modules.get(rel, ""), name):
                found.add((rel, name))
    return frozenset(found)


def _may_forward(data: bytes) -> bool:
    """Whether some call of a ``load`` may pass ``**`` (a byte test that never says no
    to a file that has one): most files with a ``def f(**kwargs)`` and a ``json.load(f)``
    then need no parse. A call's text holding a quote or a comment (a bracket inside
    may end it elsewhere) counts as maybe."""
    for match in _LOAD.finditer(data):
        if match.start() and (data[match.start() - 1:match.start()].isalnum() or data[match.start() - 1] == 95):
            continue  # ``download(``: another name
        if match.group(1) != b"(":
            return True
        args = _call_arguments(data, match.start(1))
        if args is None or b"**" in args or any(c in args for c in (b"'", b'"', b"#")):
            return True
    return False


def _forwarding_loaders(data: bytes) -> Iterator[str]:
    tree = parse_uncached(data)
    if tree is None:
        return
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.args.kwarg is not None:
            kwarg = node.args.kwarg.arg
            if any(_forwards(call, kwarg) for call in ast.walk(node) if isinstance(call, ast.Call)):
                yield node.name


def _forwards(call: ast.Call, kwarg: str) -> bool:
    last = call.func.attr if isinstance(call.func, ast.Attribute) else getattr(call.func, "id", "")
    return last == "load" and any(k.arg is None and isinstance(k.value, ast.Name) and k.value.id == kwarg
                                  for k in call.keywords)


def _all_calls_map(sources: Mapping[str, bytes], module: str, name: str) -> bool:
    """Whether ``name`` of ``module`` is called at least once, always with ``map_location=``."""
    short = module.rsplit(".", 1)[-1].encode("utf-8", "surrogateescape")  # a Latin-1 file name too
    calls = 0
    for rel, data in sources.items():
        if name.encode() not in data:
            continue
        for match in re.finditer(rb"(\w+)?(\.)?(?<!\w)" + re.escape(name.encode()) + rb"\b", data):
            line_start = data.rfind(b"\n", 0, match.start()) + 1
            line = data[line_start:match.start()].lstrip()
            if line.startswith((b"def ", b"from ", b"import ", b"#")):
                continue
            receiver, dot = match.group(1), match.group(2)
            if dot and receiver != short:
                continue  # another object's method of the same name
            if receiver and not dot:
                continue
            args = _call_arguments(data, match.end())
            if args is None or not _MAP_LOCATION.search(args):
                return False  # handed on as a value, or called without a location
            calls += 1
    return calls > 0


def _call_arguments(data: bytes, at: int) -> Optional[bytes]:
    """The text between the parentheses of a call that starts at ``at``, or None."""
    while at < len(data) and data[at:at + 1] in b" \t":
        at += 1
    if data[at:at + 1] != b"(":
        return None
    depth = 0
    for index in range(at, len(data)):
        char = data[index:index + 1]
        if char in b"([{":
            depth += 1
        elif char in b")]}":
            depth -= 1
            if depth == 0:
                return data[at + 1:index]
    return None

