"""The house's limits on porter's own source (STYLE.md, DEV_COMMON): no module over 500
lines, no folder but the rule catalogue (src/porter/rules) over 15 modules, and no import of
LibCST's private modules (``libcst._nodes...``, ``from libcst import _x``)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "src"
MODULES = sorted(p for p in SRC.rglob("*.py") if "__pycache__" not in p.parts) + [ROOT / "mkdocs_hooks.py"]
MAX_LINES = 500
MAX_MODULES = 15
CATALOGUE = SRC / "porter" / "rules"


def test_no_module_over_500_lines():
    long = {str(p.relative_to(ROOT)): n for p in MODULES if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not long, f"split these by responsibility: {long}"


def test_no_folder_but_the_rule_catalogue_over_15_modules():
    folders = {p.parent for p in MODULES if p.parent != ROOT}
    crowded = {str(f.relative_to(ROOT)): n for f in folders
               if f != CATALOGUE and (n := len(list(f.glob("*.py")))) > MAX_MODULES}
    assert not crowded, f"group these into sub-packages: {crowded}"


def private_libcst_imports(tree: ast.AST) -> list[str]:
    """The LibCST modules or names an import reaches that are private (a part starts with ``_``)."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
        else:
            continue
        found += [name for name in names
                  if name.split(".")[0] == "libcst" and any(part.startswith("_") for part in name.split(".")[1:])]
    return found


def test_no_import_of_libcst_private_modules():
    found = {str(p.relative_to(ROOT)): hits for p in MODULES
             if (hits := private_libcst_imports(ast.parse(p.read_text(), str(p))))}
    assert not found, found


def test_the_import_check_sees_each_form():
    source = ("from libcst._nodes.internal import CodegenState\nimport libcst._position\n"
              "from libcst import _nodes\nfrom libcst.metadata import PositionProvider\nimport libcst as cst\n")
    assert private_libcst_imports(ast.parse(source)) == [
        "libcst._nodes.internal", "libcst._nodes.internal.CodegenState", "libcst._position", "libcst._nodes"]
