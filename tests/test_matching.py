"""The name resolver: aliases and from-imports resolve; shadowing and lookalikes don't."""

import ast

import libcst as cst
import pytest

from porter.rulebase.matching import Ambiguous, Resolver
from porter.engine.prefilter import syntax_facts


@pytest.fixture(params=["scopes", "ast-facts"], autouse=True)
def mode(request):
    """Every case runs through the full scope pass and through the fast path that
    uses the pre-filter's import facts (falling back to scopes where needed)."""
    global MODE
    MODE = request.param


def resolve_all(code: str, wanted: str):
    """The qualified names of every call whose callee ends with ``wanted``, in order."""
    module = cst.parse_module(code)
    facts = syntax_facts(ast.parse(code)).imports if MODE == "ast-facts" else None
    resolver = Resolver(module, facts)
    found = []

    class Finder(cst.CSTVisitor):
        def visit_Call(self, node):
            if module.code_for_node(node.func).endswith(wanted):
                found.append(resolver.qualname(node.func))

    module.visit(Finder())
    return found


@pytest.mark.parametrize("code,expected", [
    ("import torch\ntorch.cuda.synchronize()", "torch.cuda.synchronize"),
    ("import torch as t\nt.cuda.synchronize()", "torch.cuda.synchronize"),
    ("import torch.cuda\ntorch.cuda.synchronize()", "torch.cuda.synchronize"),
    ("import torch.cuda as tc\ntc.synchronize()", "torch.cuda.synchronize"),
    ("from torch import cuda\ncuda.synchronize()", "torch.cuda.synchronize"),
    ("from torch.cuda import synchronize\nsynchronize()", "torch.cuda.synchronize"),
    ("from torch.cuda import synchronize as sync_synchronize\nsync_synchronize()", "torch.cuda.synchronize"),
    ("def f():\n    import torch\n    torch.cuda.synchronize()", "torch.cuda.synchronize"),
    ("import torch\nclass A:\n    def f(self):\n        torch.cuda.synchronize()", "torch.cuda.synchronize"),
    ("import torch\nclass A:\n    torch = 1\n    def f(self):\n        torch.cuda.synchronize()",
     "torch.cuda.synchronize"),
    ("import torch\n[torch.cuda.synchronize() for _ in range(2)]", "torch.cuda.synchronize"),
])
def test_resolves(code, expected):
    assert resolve_all(code, "synchronize") == [expected]


@pytest.mark.parametrize("code", [
    "def f(torch):\n    torch.cuda.synchronize()",
    "import torch\ndef f():\n    torch = g()\n    torch.cuda.synchronize()",
    "import torch\ndef f():\n    torch.cuda.synchronize()\n    torch = 1",
    "import torch\nlambda torch: torch.cuda.synchronize()",
    "import torch\n[torch.cuda.synchronize() for torch in xs]",
    "import torch\nfor torch in xs:\n    torch.cuda.synchronize()",
    "import torch\nwith x as torch:\n    torch.cuda.synchronize()",
    "torch.cuda.synchronize()",
    "import torch\ntorch = None\ntorch.cuda.synchronize()",
])
def test_shadowed(code):
    assert resolve_all(code, "synchronize") == [None]


@pytest.mark.parametrize("code,expected", [
    ("import mylib as torch\ntorch.cuda.synchronize()", "mylib.cuda.synchronize"),
    ("from mylib import cuda\ncuda.synchronize()", "mylib.cuda.synchronize"),
    ("from . import torch\ntorch.cuda.synchronize()", ".torch.cuda.synchronize"),
])
def test_lookalikes_resolve_to_what_they_are(code, expected):
    assert resolve_all(code, "synchronize") == [expected]


def test_global_declaration_reaches_module_binding():
    code = "def setup():\n    global torch\n    import torch\n\ndef f():\n    torch.cuda.synchronize()"
    assert resolve_all(code, "synchronize") == ["torch.cuda.synchronize"]


def test_disagreeing_imports_are_ambiguous():
    code = "try:\n    import torch_npu as torch\nexcept ImportError:\n    import torch\ntorch.cuda.synchronize()"
    [found] = resolve_all(code, "synchronize")
    assert isinstance(found, Ambiguous)


def test_agreeing_imports_resolve():
    code = "import torch\nif x:\n    import torch\ntorch.cuda.synchronize()"
    assert resolve_all(code, "synchronize") == ["torch.cuda.synchronize"]


def test_import_statement_names_are_not_uses():
    """Names inside import statements, at any depth, are bindings: never rewritten."""
    from porter.engine.process import Options, migrate_source
    from porter.engine.registry import all_rules

    code = ("from torch import compile\n"
            "def f(g):\n    from torch import compile\n    import torch.cuda as cuda\n"
            "    return compile(g), compile\n")
    new = migrate_source(code.encode(), Options(rules=all_rules())).new.decode()
    compile_ = __builtins__["compile"] if isinstance(__builtins__, dict) else __builtins__.compile
    compile_(new, "x.py", "exec")
    assert "import porter_runtime" in new
    assert "return porter_runtime.compile(g), porter_runtime.compile" in new, new
    assert all("porter_runtime" not in line for line in new.splitlines() if line.lstrip().startswith("from ")), new


def test_the_resolver_follows_the_walk_it_is_told_of():
    """The pass tells the resolver where it is (``enter``/``leave``): a Name of an import
    statement is a binding, the name of an attribute is no import's; once the walk has
    left the import, the same name is a use again."""
    code = "from re import compile\nimport re\nre.compile(compile)\n"
    module = cst.parse_module(code)
    resolver = Resolver(module, syntax_facts(ast.parse(code)).imports if MODE == "ast-facts" else None)
    from_import = module.body[0].body[0]
    imported = from_import.names[0].name
    call = module.body[2].body[0].value
    use = call.args[0].value
    resolver.enter(from_import)
    assert resolver.qualname(imported) is None
    resolver.leave(from_import)
    assert resolver.qualname(use) == "re.compile"
    assert resolver.qualname(call.func) == "re.compile"
    resolver.enter(call.func)  # re.compile: its ``compile`` is an attribute's name
    assert resolver.qualname(call.func.attr) is None
    assert resolver.qualname(use) == "re.compile"
