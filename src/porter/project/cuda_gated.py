"""Modules of the tree that only code run where CUDA is imports.

whisper's ``triton_ops.py`` imports triton at its top, yet the tree imports it only
lazily, for CUDA tensors::

    # timing.py
    def median_filter(x, filter_width):
        if x.is_cuda:
            try:
                from .triton_ops import median_filter_cuda   # a CUDA-only region
                ...

    def dtw_cuda(x, BLOCK_SIZE=1024):
        from .triton_ops import dtw_kernel   # a function called only under `if x.is_cuda:`

Off CUDA nothing imports the module, so what porter finds in it (TP603's triton import,
TP601's kernels) never runs on a Mac: it is listed for information (porter.engine.stages.notes).
An import anywhere else (at a module's top, in a function called off CUDA, or a function
named in another file) keeps the findings. The regions are porter.rulebase.conditions.guards';
candidates are the modules that import a CUDA-only package themselves, so that only
their importers are parsed.
"""

from __future__ import annotations

import ast
import re
from typing import Callable, Mapping, Optional, Sequence

from porter.rulebase.cuda_packages import is_cuda_only_module
from porter.rulebase.conditions.guards import Region, cuda_regions, parse, statements

#: An import line, matched at a line's start (``_line_starts``).
_IMPORT_LINE = re.compile(rb"[ \t]*(?:from|import)[ \t]+[^\n]*")


def cuda_gated_modules(sources: Mapping[str, bytes], modules: Mapping[str, str]) -> frozenset[str]:
    """Files of the tree whose every import in the tree lies in code run only where CUDA is."""
    candidates = [rel for rel, data in sources.items() if _imports_cuda_package(data)]
    trees: dict[str, Optional[ast.Module]] = {}

    def tree_of(rel: str) -> Optional[ast.Module]:
        """Each file parsed once for all the candidates (a short name such as ``utils``
        is in most files of a tree)."""
        if rel not in trees:
            trees[rel] = parse(sources[rel])
        return trees[rel]

    guesses: dict[str, list[tuple[bool, str]]] = {}

    def likely_first(module: str) -> list[tuple[str, bytes]]:
        """The files in the order to look at them: the answer is the same in any order
        (every importer must be gated), so those whose import lines seem to name the
        module at their top come first (most often one parse then says no), then those
        already parsed."""
        def rank(item: tuple[str, bytes]) -> int:
            rel, data = item
            if rel not in guesses:
                guesses[rel] = _import_lines(rel, data)
            named = [top for top, name in guesses[rel] if _names_module(name, module)]
            return 0 if any(named) else 1 if named else 2 if rel in trees else 3
        return sorted(sources.items(), key=rank)

    return frozenset(rel for rel in candidates if modules.get(rel)
                     and _only_gated_imports(likely_first(modules[rel]), tree_of, rel, modules[rel]))


def _imports_cuda_package(data: bytes) -> bool:
    if b"import" not in data:
        return False
    for line in _matches(_IMPORT_LINE, data):
        words = line.decode("utf-8", "replace").replace(",", " ").split()
        if len(words) > 1 and words[0] in ("import", "from") and is_cuda_only_module(words[1]):
            return True
    return False


#: An import statement's first line: indent, then ``from`` and its module and names, or
#: ``import`` and its modules (a guess only, to order the files: the trees decide).
_IMPORT_STMT = re.compile(rb"([ \t]*)(?:from[ \t]+(\.*[\w.]*)[ \t]+import[ \t]+\(?([\w., \t]*)|import[ \t]+([\w., \t]*))")


def _line_starts(data: bytes) -> list[int]:
    """Where each line that holds ``from`` or ``import`` starts: what a pattern anchored
    at lines (``^`` and ``re.M``) could match, found by plain byte searches, which are
    several times faster over a large tree than the anchored pattern's scan."""
    starts = set()
    for word in (b"from", b"import"):
        at = data.find(word)
        while at >= 0:
            starts.add(data.rfind(b"\n", 0, at) + 1)
            at = data.find(word, at + 1)
    return sorted(starts)


def _matches(pattern: re.Pattern[bytes], data: bytes) -> list:
    """What ``findall`` of ``pattern`` anchored at each line's start gives (one line each)."""
    found = []
    for start in _line_starts(data):
        match = pattern.match(data, start)
        if match:
            found.append(match.group() if pattern.groups == 0 else match.groups(b""))
    return found


def _import_lines(rel: str, data: bytes) -> list[tuple[bool, str]]:
    """(at the file's top, dotted name) for what each import line seems to import,
    resolved as :func:`_imports` does."""
    found = []
    for indent, source, names, modules in _matches(_IMPORT_STMT, data):
        top = not indent
        if modules:
            found += [(top, word.split()[0].decode()) for word in modules.split(b",") if word.split()]
            continue
        source = source.decode()
        aliases = [word.split()[0].decode() for word in names.split(b",") if word.split()]
        module = source.lstrip(".")
        level = len(source) - len(module)
        if level:
            package = rel.split("/")[:-1]
            base = package[: len(package) - (level - 1)] if level > 1 else package
            target = ".".join(base + ([module] if module else []))
            found += [(top, target)] if module else [(top, f"{target}.{a}") for a in aliases]
        else:
            found += [(top, module)] + [(top, f"{module}.{a}") for a in aliases]
    return found


def _only_gated_imports(sources: Sequence[tuple[str, bytes]], tree_of: Callable[[str], Optional[ast.Module]],
                        home: str, module: str) -> bool:
    if not module:
        return False
    short = module.rsplit(".", 1)[-1]
    importers = 0
    everything = dict(sources)
    for rel, data in sources:
        if rel == home or short.encode("utf-8", "surrogateescape") not in data:  # a Latin-1 file name too
            continue
        tree = tree_of(rel)
        if tree is None:
            return False
        found = [n for n in statements(tree) if _imports(n, rel, module)]
        if not found:
            continue
        regions = _regions(tree, data)
        if not all(_gated(tree, node, regions, everything, tree_of, rel) for node in found):
            return False
        importers += 1
    return importers > 0


def _imports(node: ast.AST, rel: str, module: str) -> bool:
    """Whether ``node`` (in file ``rel``) imports ``module`` or a name from it."""
    if isinstance(node, ast.Import):
        return any(_names_module(alias.name, module) for alias in node.names)
    if not isinstance(node, ast.ImportFrom):
        return False
    if node.level:
        package = rel.split("/")[:-1]
        base = package[: len(package) - (node.level - 1)] if node.level > 1 else package
        target = ".".join(base + ([node.module] if node.module else []))
        names = [target] if node.module else [f"{target}.{a.name}" for a in node.names]
        return any(_names_module(n, module) for n in names)
    full = [node.module or ""] + [f"{node.module}.{a.name}" for a in node.names]
    return any(_names_module(n, module) for n in full)


def _names_module(name: str, module: str) -> bool:
    """``whisper.triton_ops`` or, for a script that puts its folder on ``sys.path``, ``triton_ops``."""
    return bool(name) and (name == module or module.endswith("." + name))


def _gated(tree: ast.Module, node: ast.stmt, regions: Sequence[Region], sources: Mapping[str, bytes],
           tree_of: Callable[[str], Optional[ast.Module]], rel: str) -> bool:
    """The import lies in a CUDA-only region, or in a function every use of which, in
    any file of the tree, does (a test skipped off CUDA counts: ``@pytest.mark.requires_cuda``)."""
    if _inside(node, regions):
        return True
    function = _top_function(tree, node)
    if function is None:
        return False
    word = function.name.encode()
    uses = 0
    for other, data in sources.items():
        if word not in data:
            continue
        other_tree = tree if other == rel else tree_of(other)
        if other_tree is None:
            return False
        found = [n for n in ast.walk(other_tree) if (isinstance(n, ast.Name) and n.id == function.name)
                 or (isinstance(n, ast.Attribute) and n.attr == function.name)]
        if not found:
            continue
        gates = regions if other == rel else _regions(other_tree, data)
        if not all(_inside(n, gates) for n in found):
            return False
        uses += len(found)
    return uses > 0


def _regions(tree: ast.Module, data: bytes) -> list[Region]:
    return [r for r in cuda_regions(tree, data) if r.kind in ("device", "test")]


def _inside(node: ast.AST, regions: Sequence[Region]) -> bool:
    where = (node.lineno, node.col_offset)  # type: ignore[attr-defined]
    return any(r.contains(where) for r in regions)


def _top_function(tree: ast.Module, node: ast.stmt) -> Optional[ast.FunctionDef]:
    for top in tree.body:
        if isinstance(top, ast.FunctionDef) and any(n is node for n in ast.walk(top)):
            return top
    return None
