"""House rule 12: a rule module never imports another, and each syntax helper has one
definition. Shared helpers live in the rule base layer (porter/), so a rule file can be
read, moved or removed on its own."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
RULE_FILES = sorted((ROOT / "src" / "porter" / "rules").glob("*.py"))
#: The rule base layer: the modules rules import their shared helpers from.
BASE_LAYER = [ROOT / "src" / "porter" / name for name in (
    "rulebase/rule.py", "rulebase/matching.py", "rulebase/syntax.py", "rulebase/families/thirdparty/uses.py", "rulebase/scopes.py",
    "rulebase/conditions/availability_checks.py", "rulebase/conditions/dist_guard.py", "project/requirements.py",
    "rulebase/cuda_packages.py")]


def _rule_imports(tree: ast.Module) -> list[tuple[int, str]]:
    """(line, text) of each import of a module in the rules package, at any depth."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level > 0:
                found.append((node.lineno, "." * node.level + module))
            elif module == "porter.rules" or module.startswith("porter.rules."):
                found.append((node.lineno, module))
            elif module == "porter" and any(alias.name == "rules" for alias in node.names):
                found.append((node.lineno, "porter.rules"))
        elif isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names
                      if a.name == "porter.rules" or a.name.startswith("porter.rules.")]
    return found


@pytest.mark.parametrize("path", RULE_FILES, ids=lambda p: p.name)
def test_no_rule_module_imports_another(path):
    imports = _rule_imports(ast.parse(path.read_text(), str(path)))
    assert not imports, (
        f"{path.name} imports another rule module ({imports}); move the shared helper to porter/")


def test_the_check_sees_each_kind_of_rule_import():
    source = ("from .availability import x\nfrom . import _dist_guard\nfrom porter.rules.dtypes import y\n"
              "import porter.rules.checkpoints\nfrom porter import rules\n"
              "def f():\n    from porter.rules import legacy\n")
    assert [line for line, _ in _rule_imports(ast.parse(source))] == [1, 2, 3, 4, 5, 7]
    assert _rule_imports(ast.parse("from porter.rulebase.syntax import argument\nimport porter_runtime\n")) == []


def _top_level_functions(path: Path):
    for node in ast.parse(path.read_text(), str(path)).body:
        if isinstance(node, ast.FunctionDef):
            body = node.body[1:] if ast.get_docstring(node) is not None else node.body
            params = [a.arg for a in node.args.posonlyargs + node.args.args + node.args.kwonlyargs]
            yield node.name, f"{params} {ast.dump(ast.Module(body=body, type_ignores=[]))}"


def test_each_helper_has_one_definition():
    """No module-level function of a rule file repeats (same parameter names and body,
    whatever its name, docstring or annotations) one in another rule file or in the rule
    base layer."""
    seen: dict[str, str] = {}
    twins = []
    for path in RULE_FILES + BASE_LAYER:
        for name, shape in _top_level_functions(path):
            where = f"{path.relative_to(ROOT)}:{name}"
            if shape in seen:
                twins.append((seen[shape], where))
            seen.setdefault(shape, where)
    assert not twins, f"the same helper is defined twice: {twins}"
