"""Fuzzing: CUDA constructs inside arbitrary surrounding syntax.

Hypothesis builds programs that mix device code (``x.cuda()``, ``torch.device("cuda")``,
``device="cuda"``, ...) with decorators, comprehensions, f-strings, the walrus, match
statements, type hints, nested functions, lambdas, classes, strings, comments and
``# porter: ignore`` lines. For each one the output must compile, be idempotent, keep
every string and comment, and change only lines where a rewrite was reported.
``PORTER_FUZZ_EXAMPLES=1000`` runs a longer search than CI's 40 examples.

Then every rewrite a rule's examples show, with comments inside its calls' arguments
(after an opening parenthesis, after each comma, before the closing one): every comment
must survive the rewrite (issue 43).
"""

import ast
import difflib
import importlib.util
import io
import os
import sys
import tokenize
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from porter.engine.process import Options, migrate_source
from porter.engine.registry import all_rules
from porter.project.model import build_from
from porter.rulebase.rule import Rule

_spec = importlib.util.spec_from_file_location("porter_bench_corpus", Path(__file__).parent.parent / "bench" / "corpus.py")
corpus = sys.modules.setdefault("porter_bench_corpus", importlib.util.module_from_spec(_spec))
_spec.loader.exec_module(corpus)

OPTIONS = Options(rules=all_rules())
ALLOWED_NEW = corpus.runtime_import_literals()

# Device code porter may rewrite (each a one-line expression).
CUDA = [
    "x.cuda()", "torch.ones(2).cuda(non_blocking=True)", "model.cuda(0)", 'torch.device("cuda")',
    "torch.device('cuda:1')", 'torch.zeros(3, device="cuda")', 't.to("cuda")', "t.to('cuda:0')",
    "torch.randn(2, 2, device='cuda')", "x.new_zeros(2, device='cuda')", "x",
    # comments inside a rewritten call's arguments (issue 43): they must survive
    "x.cuda(0,  # first gpu\n)", "x.cuda(non_blocking=True  # async copy\n)", 'torch.device("cuda"  # the gpu\n)',
    "torch.cuda.manual_seed(\n    42,  # seed\n)", 'torch.zeros(3,  # rows\n    device="cuda"  # where\n)',
    "t.to(\n    # the device\n    'cuda:0',\n)",
]
# Text that looks like device code but lives in strings and comments: never touched.
DECOYS = [
    's = "x.cuda()"', "doc = 'torch.device(\"cuda\")'", 's = f"{x!r} moved with .cuda() to {dev}"',
    "# move it with .cuda() then torch.device('cuda')\npass", 'msg = """device="cuda"\n.cuda()\n"""',
    "raw = rb'\\x00 cuda'", "name = 'cuda'",
]
NAMES = st.sampled_from(["a", "b", "val", "out", "dev"])


@st.composite
def expr(draw):
    return draw(st.sampled_from(CUDA))


@st.composite
def simple(draw):
    """One line (or a small block) of straight-line code."""
    e, name = draw(expr()), draw(NAMES)
    return draw(st.sampled_from([
        f"{name} = {e}",
        f"{name}: torch.Tensor = {e}",
        f"{name} = [{e} for _ in range(2)]",
        f"{name} = {{k: {e} for k in 'ab'}}",
        f"{name} = ({e} for _ in range(2) if _)",
        f"if ({name} := {e}) is not None:\n    pass",
        f"{name} = lambda t: {e}",
        f"{name} = ({e}, f'{{{name}!s:>10}} done')",
        f"{name} = {e}  # porter: ignore",
        f"{name} = {e}  # porter: ignore[PT001]",
        f"print({e}, sep='')",
        f"assert {e} is not None, 'cuda needed'",
        *DECOYS,
    ]))


def indent(block: str, level: int = 1) -> str:
    pad = "    " * level
    return "\n".join(pad + line if line else line for line in block.split("\n"))


@st.composite
def block(draw, depth=0):
    """A statement: simple, or a compound one wrapping a body."""
    if depth >= 3 or draw(st.booleans()):
        return draw(simple())
    body = "\n".join(draw(st.lists(block(depth + 1), min_size=1, max_size=3)))
    n = draw(st.integers(0, 99))
    kind = draw(st.sampled_from(["def", "async", "decorated", "class", "match", "with", "try", "for", "nested"]))
    if kind == "def":
        return f"def f{n}(x: torch.Tensor, *args, dev: str = 'cpu', **kw) -> torch.Tensor:\n{indent(body)}\n    return x"
    if kind == "async":
        return f"async def g{n}(x):\n    '''Moves .cuda() tensors.'''\n{indent(body)}\n    await sleep(0)"
    if kind == "decorated":
        return f"@functools.lru_cache(maxsize=None)\n@staticmethod\ndef h{n}(x=None):\n{indent(body)}"
    if kind == "class":
        return f"class C{n}(torch.nn.Module):\n    dev: 'str' = 'cpu'\n\n    def forward(self, x):\n{indent(body, 2)}"
    if kind == "match":
        return (f"match command:\n    case ['go', ('cuda' | 'mps') as where]:\n{indent(body, 2)}\n"
                f"    case {{'device': str(d)}} if d:\n        pass\n    case _:\n{indent(body, 2)}")
    if kind == "with":
        return f"with torch.no_grad(), open(path) as fh:\n{indent(body)}"
    if kind == "try":
        return f"try:\n{indent(body)}\nexcept (RuntimeError, ValueError) as err:\n    raise\nfinally:\n    pass"
    if kind == "for":
        return f"for i, (p, q) in enumerate(zip(ps, qs), start=1):\n{indent(body)}\nelse:\n    pass"
    return f"def outer{n}():\n    def inner(y):\n{indent(body, 2)}\n    return inner"


@st.composite
def program(draw):
    header = draw(st.sampled_from([
        "import torch\n", '"""A module."""\nfrom __future__ import annotations\n\nimport torch\n',
        "import functools\nimport torch\nfrom torch import device\n", "# -*- coding: utf-8 -*-\nimport torch  # the framework\n",
    ]))
    body = "\n".join(draw(st.lists(block(), min_size=1, max_size=5)))
    return f"{header}\n{body}\n"


def logical_lines(source: str) -> dict[int, range]:
    """Each physical line's logical line (the lines of one statement's brackets)."""
    spans, start, depth = {}, 1, 0
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.OP:
            depth += (tok.string in "([{") - (tok.string in ")]}")
        if tok.type in (tokenize.NEWLINE, tokenize.NL) and depth == 0:
            for line in range(start, tok.end[0] + 1):
                spans[line] = range(start, tok.end[0] + 1)
            start = tok.end[0] + 1
    return spans


def changed_old_lines(old: str, new: str) -> set[int]:
    """1-based numbers of the original lines that the output replaced or deleted."""
    a, b = old.splitlines(keepends=True), new.splitlines(keepends=True)
    lines: set[int] = set()
    for tag, i1, i2, _, _ in difflib.SequenceMatcher(a=a, b=b, autojunk=False).get_opcodes():
        if tag in ("replace", "delete"):
            lines.update(range(i1 + 1, i2 + 1))
    return lines


@settings(max_examples=int(os.environ.get("PORTER_FUZZ_EXAMPLES", "40")), deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(program())
def test_fuzzed_programs_are_migrated_safely(source):
    data = source.encode()
    compile(data, "fuzz.py", "exec", dont_inherit=True)  # the generator makes valid code
    result = migrate_source(data, OPTIONS)
    new = result.new
    compile(new, "fuzz.py", "exec", dont_inherit=True)
    assert migrate_source(new, OPTIONS).new == new, "not idempotent"
    assert corpus.literal_violations(data, new, ALLOWED_NEW) == []
    rewritten = {f.line for f in result.rewrites}
    old_lines, spans = source.splitlines(), logical_lines(source)
    for number in changed_old_lines(source, new.decode()):
        line = old_lines[number - 1]
        assert not rewritten.isdisjoint(spans.get(number, (number,))) or not line.strip() or line.startswith(("from torch import", "import ")), (
            f"line {number} changed without a rewrite: {line!r}")
    for line in old_lines:
        if line.endswith("# porter: ignore"):
            assert line in new.decode().splitlines(), f"suppressed line changed: {line!r}"
    if new != data:
        assert result.rewrites and "porter_runtime" in new.decode()


# -- comments inside the arguments of every rewrite the rules' examples show ------------
REWRITES = [(rule, example) for rule in all_rules() if issubclass(rule, Rule)
            for example in rule.invalid if example.after is not None and example.path.endswith(".py")]


def comment_spots(code: str) -> list[int]:
    """Offsets inside brackets where a comment and a line break may go: after ``(`` and
    each comma, before ``)``. Not inside a ``try: import ... except ImportError`` block,
    which a rule may remove whole (an import of a CUDA-only package and its fallback)."""
    offsets = [0]
    for line in code.splitlines(keepends=True):
        offsets.append(offsets[-1] + len(line))
    removable = _import_fallback_lines(code)
    depth, spots = 0, []
    for tok in tokenize.generate_tokens(io.StringIO(code).readline):
        if tok.type != tokenize.OP or tok.start[0] in removable:
            continue
        at = offsets[tok.start[0] - 1] + tok.start[1]
        depth += (tok.string in "([{") - (tok.string in ")]}")
        if tok.string == "(" or (tok.string == "," and depth > 0):
            spots.append(at + 1)
        elif tok.string == ")":
            spots.append(at)
    return spots


def _import_fallback_lines(code: str) -> set[int]:
    """The lines of the import blocks a rule may remove whole, and of the checks that
    raise ImportError when one failed (removed with it)."""
    lines: set[int] = set()
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.Try) and all(_names_import_error(h.type) for h in node.handlers):
            lines.update(range(node.lineno, node.end_lineno + 1))
        if isinstance(node, ast.If) and all(isinstance(s, ast.Raise) and _names_import_error(s.exc) for s in node.body):
            lines.update(range(node.lineno, node.end_lineno + 1))
    return lines


def _names_import_error(node) -> bool:
    return node is not None and any(word in ast.unparse(node) for word in ("ImportError", "ModuleNotFoundError"))


def with_comments(code: str, spots) -> str:
    for k, at in sorted(enumerate(spots), key=lambda e: -e[1]):
        code = f"{code[:at]}  # note {k}\n{code[at:]}"
    return code


def comments(code: bytes) -> Counter:
    """The comments the test put in (an example's own comment on an import block a
    rule removes may go with it)."""
    return Counter(t.string for t in tokenize.tokenize(io.BytesIO(code).readline)
                   if t.type == tokenize.COMMENT and t.string.startswith("# note "))


def migrate_example(rule, example, code: str):
    project = None
    if example.project:  # as test_rule_examples builds it: the modules, and the tree's other texts (a YAML config)
        sources = {**{p: c.encode() for p, c in example.project if p.endswith(".py")}, example.path: code.encode()}
        texts = {p: c.encode() for p, c in example.project if not p.endswith(".py")}
        project = build_from(sources, texts or None)
    options = Options(rules=[rule], unsafe_fixes=True, project=project)
    return migrate_source(code.encode(), options, path=example.path)


def assert_comments_survive(rule, example, spots):
    code = with_comments(example.before, spots)
    compile(code, "example.py", "exec", dont_inherit=True)
    result = migrate_example(rule, example, code)
    compile(result.new, "example.py", "exec", dont_inherit=True)
    lost = comments(code.encode()) - comments(result.new)
    assert not lost, f"{rule.code} lost {sorted(lost)}:\n{code}\n---->\n{result.new.decode()}"
    assert result.rewrites, f"{rule.code}: the comments stopped the rewrite:\n{code}"
    assert migrate_example(rule, example, result.new.decode()).new == result.new, "not idempotent"


@pytest.mark.parametrize("rule", sorted({r for r, _ in REWRITES}, key=lambda r: r.code), ids=lambda r: r.code)
def test_comments_at_every_spot_of_every_rewrite_survive(rule):
    for example in [e for r, e in REWRITES if r is rule]:
        spots = comment_spots(example.before)
        if spots:
            assert_comments_survive(rule, example, spots)


@settings(max_examples=int(os.environ.get("PORTER_FUZZ_EXAMPLES", "40")), deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_comments_at_random_spots_of_a_rewrite_survive(data):
    rule, example = data.draw(st.sampled_from(REWRITES))
    spots = comment_spots(example.before)
    if spots:
        assert_comments_survive(rule, example, data.draw(st.lists(st.sampled_from(spots), unique=True, min_size=1)))
