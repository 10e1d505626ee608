"""Rules know the file they run on only as ``porter.rulebase.rule.RuleContext``: what they read
of their context is declared there, and the engine's ``FileContext`` provides all of it."""

import ast
import typing
from pathlib import Path

import libcst as cst

from porter.engine.stages.context import FileContext
from porter.engine.options import Options
from porter.engine.registry import all_rules
from porter.rulebase.rule import RuleContext

ROOT = Path(__file__).resolve().parent.parent
#: The rule modules and the rule base itself.
SOURCES = [*sorted((ROOT / "src" / "porter" / "rules").glob("*.py")), ROOT / "src" / "porter" / "rulebase" / "rule.py"]


def declared() -> set[str]:
    members = set(typing.get_type_hints(RuleContext))
    return members | {name for name in vars(RuleContext) if not name.startswith("_")}


def used_by_rules() -> dict[str, str]:
    """What ``ctx.X`` / ``self.ctx.X`` / ``rule.ctx.X`` the rules read, with where."""
    used = {}
    for path in SOURCES:
        for node in ast.walk(ast.parse(path.read_bytes())):
            if isinstance(node, ast.Attribute) and (
                    isinstance(node.value, ast.Name) and node.value.id == "ctx"
                    or isinstance(node.value, ast.Attribute) and node.value.attr == "ctx"):
                used.setdefault(node.attr, f"{path.relative_to(ROOT)}:{node.lineno}")
    return used


def test_rules_read_only_what_the_context_protocol_declares():
    used = used_by_rules()
    assert {"module", "record", "suppressed", "unsafe_fixes"} <= used.keys()  # the scan sees the rules' reads
    undeclared = {name: where for name, where in used.items() if name not in declared()}
    assert not undeclared, f"rules read context members RuleContext does not declare: {undeclared}"


def test_the_engines_file_context_provides_the_protocol():
    module = cst.parse_module("import torch\ntorch.cuda.synchronize()\n")
    ctx = FileContext(module, module.bytes, "x.py", Options(rules=all_rules()))
    missing = [name for name in declared() if not hasattr(ctx, name)]
    assert not missing, f"FileContext lacks {missing}"
