"""Fuzzing: CUDA constructs inside arbitrary surrounding syntax.

Hypothesis builds programs that mix device code (``x.cuda()``, ``torch.device("cuda")``,
``device="cuda"``, ...) with decorators, comprehensions, f-strings, the walrus, match
statements, type hints, nested functions, lambdas, classes, strings, comments and
``# porter: ignore`` lines. For each one the output must compile, be idempotent, keep
every string and comment, and change only lines where a rewrite was reported.
``PORTER_FUZZ_EXAMPLES=1000`` runs a longer search than CI's 40 examples.
"""

import difflib
import importlib.util
import os
import sys
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from porter.engine.process import Options, migrate_source
from porter.engine.registry import all_rules

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
    old_lines = source.splitlines()
    for number in changed_old_lines(source, new.decode()):
        line = old_lines[number - 1]
        assert number in rewritten or not line.strip() or line.startswith(("from torch import", "import ")), (
            f"line {number} changed without a rewrite: {line!r}")
    for line in old_lines:
        if line.endswith("# porter: ignore"):
            assert line in new.decode().splitlines(), f"suppressed line changed: {line!r}"
    if new != data:
        assert result.rewrites and "porter_runtime" in new.decode()
