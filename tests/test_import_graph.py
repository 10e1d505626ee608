"""Dependencies flow one way: no import cycle inside porter, and the runtime stands apart.

The graph is read from the source with ``ast``, not from ``sys.modules``: every
``import`` and ``from ... import`` anywhere in a module counts, the ones under ``if
TYPE_CHECKING:`` and inside functions too (a late import hides a cycle, it doesn't
break it). Folders under ``src/`` are the packages they install as.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Iterator, Optional

ROOT = Path(__file__).resolve().parent.parent
#: Source folder (under src/) → the package it is; its sub-folders are its sub-packages.
PACKAGES = {"porter": "porter", "porter_runtime": "porter_runtime"}
#: What the runtime may never import (the brief: it depends on torch alone).
RUNTIME_FORBIDDEN = ("porter", "libcst", "click", "rich")
#: Cycles tolerated while another change removes them; each entry must go with its cycle.
PENDING: list[set[str]] = []


def modules(folder: str, root: Path = ROOT) -> dict[str, Path]:
    """Module name → file, for one installed package and its sub-packages."""
    base = root / "src" / folder
    found = {}
    for path in sorted(base.rglob("*.py")):
        parts = [PACKAGES[folder], *path.relative_to(base).with_suffix("").parts]
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def imported_names(module: str, path: Path) -> Iterator[tuple[str, int]]:
    """(dotted name, line) of everything ``module`` imports, relative imports made absolute."""
    package = module if path.stem == "__init__" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_bytes(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(package, node.level, node.module)
            for alias in node.names:
                # ``from porter import engine`` imports a module, ``from porter.engine.process
                # import Options`` a name; the graph keeps whichever is a module.
                yield (f"{base}.{alias.name}" if alias.name != "*" else base), node.lineno
                yield base, node.lineno


def _absolute(package: str, level: int, name: Optional[str]) -> str:
    if not level:
        return name or ""
    parts = package.split(".")
    base = ".".join(parts[: len(parts) - level + 1])
    return f"{base}.{name}" if name else base


def graph(known: dict[str, Path]) -> dict[str, dict[str, int]]:
    """module → {module it imports: the line of the first such import}, inside ``known``."""
    edges: dict[str, dict[str, int]] = {m: {} for m in known}
    for module, path in known.items():
        for name, line in imported_names(module, path):
            target = _known_prefix(name, known)
            if target is not None and target != module:
                edges[module].setdefault(target, line)
    return edges


def _known_prefix(name: str, known: dict[str, Path]) -> Optional[str]:
    """The module ``name`` loads that the graph tracks (the longest known prefix), or
    None; a package's ``__init__`` counts only when it is named itself."""
    parts = name.split(".")
    for end in range(len(parts), 0, -1):
        candidate = ".".join(parts[:end])
        if candidate in known:
            return candidate if end == len(parts) or not (known[candidate].stem == "__init__") else None
    return None


def cycles(edges: dict[str, dict[str, int]]) -> list[list[str]]:
    """One cycle (a list of modules, the first repeated at the end) per group of
    modules that import each other."""
    return [_one_cycle(sorted(group)[0], group, edges) for group in groups(edges)]


def groups(edges: dict[str, dict[str, int]]) -> list[set[str]]:
    """The strongly connected groups of two or more modules (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[set[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in edges[node]:
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            group = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.add(member)
                if member == node:
                    break
            if len(group) > 1:
                groups.append(group)

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return groups


def _one_cycle(start: str, group: set[str], edges: dict[str, dict[str, int]]) -> list[str]:
    """The shortest way from ``start`` back to itself inside ``group`` (breadth first)."""
    previous: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for target in sorted(edges[node]):
                if target not in group:
                    continue
                if target == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(previous[path[-1]])
                    return [start, *reversed(path[:-1]), start]
                if target not in previous:
                    previous[target] = node
                    following.append(target)
        frontier = following
    raise AssertionError(f"no cycle through {start}")  # Tarjan's group always has one


def describe(cycle: list[str], edges: dict[str, dict[str, int]]) -> str:
    return " -> ".join(f"{a} (line {edges[a][b]})" for a, b in zip(cycle, cycle[1:])) + f" -> {cycle[-1]}"


def cycle_report(edges: dict[str, dict[str, int]]) -> str:
    """Each cycle through each module caught in one, named with the lines that close it."""
    found: dict[frozenset, str] = {}
    for group in groups(edges):
        for member in sorted(group):
            cycle = _one_cycle(member, group, edges)
            found.setdefault(frozenset(zip(cycle, cycle[1:])), describe(cycle, edges))
    return "\n".join(found.values())


def test_the_graph_sees_every_kind_of_import():
    """The graph itself, on porter's own files: ``from package import module`` and the
    rule package's modules are edges (relative imports: the temporary trees below)."""
    known = modules("porter")
    edges = graph(known)
    assert "porter.rulebase.syntax" in edges["porter.rules.cuda_available_device"]  # from porter.rulebase.syntax import ...
    assert "porter.rulebase.conditions.dist_guard" in edges["porter.rulebase.families.availability.roles"]  # from porter import dist_guard
    assert "porter.rules" in edges["porter.engine.registry"]  # import porter.rules as package
    assert "porter.rulebase.rule" in edges["porter.engine.registry"]
    assert "porter.report.summary" in edges["porter.cli.migrate_command"]  # from porter import report as reporting


def test_a_late_import_still_closes_a_cycle(tmp_path):
    """A cycle hidden under ``if TYPE_CHECKING:`` or inside a function is found and named."""
    folder = tmp_path / "porter"
    folder.mkdir()
    (folder / "__init__.py").write_text("")
    (folder / "a.py").write_text("from porter.b import B\n")
    (folder / "b.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from . import c\n")
    (folder / "c.py").write_text("def f():\n    from porter import a\n")
    known = {f"porter.{p.stem}" if p.stem != "__init__" else "porter": p for p in folder.glob("*.py")}
    edges = graph(known)
    found = cycles(edges)
    assert found == [["porter.a", "porter.b", "porter.c", "porter.a"]]
    assert describe(found[0], edges) == "porter.a (line 1) -> porter.b (line 3) -> porter.c (line 2) -> porter.a"


def test_porter_has_no_import_cycle():
    known = modules("porter")
    edges = graph(known)
    found = groups(edges)
    new = {name: targets for name, targets in edges.items()}
    for group in found:
        if group in PENDING:  # cut the pending cycles out; anything else still shows
            for name in group:
                new[name] = {t: line for t, line in edges[name].items() if t not in group}
    assert not groups(new), "import cycles in porter:\n" + cycle_report(new)
    stale = [sorted(group) for group in PENDING if group not in found]
    assert not stale, f"no longer a cycle, remove it from PENDING: {stale}"


def runtime_offences(root: Path) -> list[str]:
    """``file:line imports name`` for each import of porter or its tools in the runtime."""
    offending: dict[str, str] = {}
    for module, path in modules("porter_runtime", root).items():
        for name, line in imported_names(module, path):
            where = f"{path.relative_to(root)}:{line}"
            if name.split(".")[0] in RUNTIME_FORBIDDEN and len(name) < len(offending.get(where, name + ".")):
                offending[where] = name  # the module of a from-import, not the name it takes
    return [f"{where} imports {name}" for where, name in sorted(offending.items())]


def test_a_runtime_import_of_porters_tools_is_named(tmp_path):
    (tmp_path / "src" / "porter_runtime").mkdir(parents=True)
    (tmp_path / "src" / "porter_runtime" / "_device.py").write_text(
        "import torch\nimport porter_runtime._log\ndef show():\n    from rich.console import Console\n")
    (tmp_path / "src" / "porter_runtime" / "_log.py").write_text("try:\n    import libcst\nexcept ImportError:\n    pass\n")
    assert runtime_offences(tmp_path) == ["src/porter_runtime/_device.py:4 imports rich.console",
                                          "src/porter_runtime/_log.py:2 imports libcst"]


def test_the_runtime_imports_nothing_of_porter_or_its_tools():
    offending = runtime_offences(ROOT)
    assert not offending, "porter_runtime must depend on torch alone:\n" + "\n".join(offending)


def test_the_layer_contracts_hold():
    """import-linter's contracts in pyproject.toml: cli -> verify | fit | report -> engine ->
    rules -> edits -> project -> files -> rulebase, no rule module imports another, and the
    runtime imports no porter, libcst, click or rich. Run in a child: import-linter builds
    its graph from the installed packages and prints as it goes."""
    import subprocess
    import sys

    code = ("import sys; from importlinter.cli import lint_imports; "
            f"sys.exit(lint_imports(config_filename={str(ROOT / 'pyproject.toml')!r}, no_cache=True, no_logo=True))")
    env = {**__import__("os").environ, "PYTHONPATH": str(ROOT / "src")}
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "3 kept, 0 broken" in done.stdout
