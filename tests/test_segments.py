"""Parsing only the definitions a rule wants (porter/engine/stages/segments.py) changes nothing.

Every rule example, padded with definitions no rule wants, migrates to the same bytes
and the same findings (lines included) with and without segments; stubs go back byte
for byte; every case where a reduction can't be exact falls back to the whole file.
"""

import pytest

from porter.engine.process import Options, migrate_source
from porter.engine.prefilter import candidate_rules
from porter.engine.registry import all_rules
from porter.rulebase.rule import Example, Rule
from porter.engine.stages.segments import reduce

SOURCE_RULES = [r for r in all_rules() if issubclass(r, Rule)]
EXAMPLES = [
    (rule, kind, i, example if isinstance(example, Example) else Example(example))
    for rule in SOURCE_RULES
    for kind, examples in (("valid", rule.valid), ("invalid", rule.invalid))
    for i, example in enumerate(examples)
]

PAD = (
    "class _PorterPad:\n"
    "    scale = 2\n\n"
    "    def one(self, x):\n"
    "        # a comment the stub hides\n"
    "        return x * self.scale\n\n"
    "    @property\n"
    "    async def two(self):\n"
    "        return 2\n\n\n"
    "@decorate(\n    'arg'\n)\n"
    "def _porter_pad(y, *, z=1):\n"
    "    '''Docstring.'''\n"
    "    return [v for v in range(y)]\n\n\n"
)


def _padded(code: str) -> list[str]:
    code = code if code.endswith("\n") or not code else code + "\n"
    out = [code + "\n\n" + PAD]
    if "__future__" not in code and not code.lstrip().startswith(("'", '"')):
        out.append(PAD + code)
    return out


def _run(code: str, options: Options, segments: bool):
    result = migrate_source(code.encode(), options, path="example.py", segments=segments)
    return result.new, [(f.code, f.line, f.column, f.action, f.message, f.before, f.after) for f in result.findings]


def _reduced(code: str, options: Options) -> bool:
    rules, facts = candidate_rules(code.encode(), options.source_rules)
    return bool(rules) and facts is not None and reduce(code.encode(), facts, rules) is not None


@pytest.mark.parametrize("rule,kind,index,example", EXAMPLES,
                         ids=[f"{r.code}-{k}-{i}" for r, k, i, _ in EXAMPLES])
def test_padded_example_is_the_same_with_and_without_segments(rule, kind, index, example):
    for options in (Options(rules=[rule], unsafe_fixes=True), Options(rules=SOURCE_RULES, unsafe_fixes=True)):
        for code in _padded(example.before):
            assert _run(code, options, True) == _run(code, options, False)


def test_the_padded_examples_do_exercise_segments():
    reduced = total = 0
    for rule, kind, _, example in EXAMPLES:
        if kind != "invalid" or rule.needs.whole_file:
            continue
        for code in _padded(example.before):
            total += 1
            reduced += _reduced(code, Options(rules=[rule], unsafe_fixes=True))
    assert total > 300 and reduced / total > 0.9, (reduced, total)


OPTIONS = Options(rules=SOURCE_RULES)

CRLF = (
    "import torch\r\n\r\n"
    "def unrelated(a):\r\n"
    "\treturn a + 1\r\n\r\n"
    "class Model:\r\n"
    "\tdef helper(self):\r\n"
    "\t\treturn 3\r\n\r\n"
    "\tdef forward(self, x):\r\n"
    "\t\treturn x.cuda()\r\n\r\n"
    "def tail():\r\n"
    "\treturn torch.zeros(2)\r\n"
)


def test_stubs_go_back_byte_for_byte_and_findings_keep_their_lines():
    rules, facts = candidate_rules(CRLF.encode(), OPTIONS.source_rules)
    reduced = reduce(CRLF.encode(), facts, rules)
    assert reduced is not None
    assert b"def unrelated(): pass  # porter-stub-" in reduced.data
    assert b"\tdef helper(): pass  # porter-stub-" in reduced.data
    assert b"forward" in reduced.data and b"def tail(): pass" in reduced.data
    assert reduced.splice(reduced.data) == CRLF.encode()
    new, findings = _run(CRLF, OPTIONS, True)
    assert (new, findings) == _run(CRLF, OPTIONS, False)
    assert findings[0][:2] == ("PT001", 11)
    assert new.count(b"\r\n") == new.count(b"\n") and b"\treturn a + 1\r\n" in new


def test_a_stub_a_rule_changed_is_never_spliced():
    rules, facts = candidate_rules(CRLF.encode(), OPTIONS.source_rules)
    reduced = reduce(CRLF.encode(), facts, rules)
    first = reduced.stubs[0][0]
    assert reduced.splice(reduced.data.replace(first, b"")) is None
    assert reduced.splice(reduced.data.replace(first, b"    " + first)) is None


def test_definitions_that_rebind_globals_are_kept_whole():
    code = ("import torch\n\ndef setup():\n    global torch\n    torch = None\n\n"
            "def move(x):\n    return x.cuda()\n")
    rules, facts = candidate_rules(code.encode(), OPTIONS.source_rules)
    assert reduce(code.encode(), facts, rules) is None
    assert _run(code, OPTIONS, True) == _run(code, OPTIONS, False)


def test_an_import_still_used_inside_a_stub_makes_the_whole_file_decide():
    # PT101 rewrites the call, the last use it sees; `other` only refers to the
    # function (no call, so no rule wants it and it is stubbed). Only the whole
    # file shows that the import is still used.
    code = (
        "from torch.cuda import synchronize\n\n"
        "def step():\n    synchronize()\n\n"
        "def other():\n    return synchronize\n"
    )
    options = Options(rules=[r for r in SOURCE_RULES if r.code == "PT101"])
    rules, facts = candidate_rules(code.encode(), options.source_rules)
    reduced = reduce(code.encode(), facts, rules)
    assert reduced is not None and "synchronize" in reduced.stub_names
    new, findings = _run(code, options, True)
    assert (new, findings) == _run(code, options, False)
    assert b"from torch.cuda import synchronize" in new and b"porter_runtime.synchronize()" in new


@pytest.mark.parametrize("code", [
    "\ufeffimport torch\n\ndef a():\n    return 1\n\ndef b(x):\n    return x.cuda()\n",  # BOM
    "import torch\r\rdef a():\r    return 1\r\rdef b(x):\r    return x.cuda()\r",  # old Mac line ends
    "import torch\n\ndef b(x):\n    return x.cuda()\n",  # nothing to leave out
])
def test_files_a_reduction_cannot_serve_are_parsed_whole(code):
    data = code.encode()
    rules, facts = candidate_rules(data, OPTIONS.source_rules)
    assert rules and reduce(data, facts, rules) is None


def test_an_attribute_name_is_not_an_imported_name():
    code = ("import torch\n\ndef get():\n    from bitsandbytes.optim import RMSprop\n    return RMSprop\n\n"
            "def other():\n    return torch.optim.RMSprop\n")
    for segments in (True, False):
        _, findings = _run(code, OPTIONS, segments)
        assert [(f[0], f[1]) for f in findings] == [("TP502", 5)]


_ATTEND = ("class Block:\n    def norm(self, x):\n        return x * 2\n\n"
           "    def attend(self, q, k, v):\n        return {call}(q, k, v)\n")
PACKAGE_IMPORTS = [
    ("xformers.ops.memory_efficient_attention", "import xformers.ops", "HAS_XFORMERS"),
    ("flash_attn_func", "from flash_attn import flash_attn_func", "HAS_FLASH"),
]


@pytest.mark.parametrize("call,imports,flag", PACKAGE_IMPORTS)
def test_package_rules_see_every_use_where_a_top_level_try_imports_the_package(call, imports, flag):
    # TP101 and TP201 decide from every use of their package in the module: its
    # import chains and availability flags (top-level `try` only). Behind an `if`, the
    # definitions that don't use the package are left out; a top-level `try` whose
    # flag a stubbed definition could read keeps the whole file.
    guarded = f"import torch\nif USE_KERNELS:\n    {imports}\n\n" + _ATTEND.format(call=call)
    probed = (f"try:\n    {imports}\n    {flag} = True\nexcept ImportError:\n    {flag} = False\n\n\n"
              f"def check():\n    assert {flag}, 'install it'\n    return True\n\n\n" + _ATTEND.format(call=call))
    for code, parts in ((guarded, True), (probed, False)):
        rules, facts = candidate_rules(code.encode(), OPTIONS.source_rules)
        reduced = reduce(code.encode(), facts, rules)
        assert (reduced is not None) == parts, code
        if parts:
            assert b"def norm(): pass" in reduced.data and b"def attend(self" in reduced.data
        new, findings = _run(code, OPTIONS, True)
        assert (new, findings) == _run(code, OPTIONS, False)
        assert b"porter_runtime." in new
    new, _ = _run(probed, OPTIONS, True)
    assert b"assert" not in new  # every use was ported: the stop went (whole file)


# PT608 and PT605 once asked for the whole file in every file they might apply to; now
# they parse only the wanted definitions and ask for the whole file when they meet a
# node whose answer needs the rest (porter.engine.stages.context.FileContext.see_whole_file).
LAZY_WHOLE_FILE = {
    # the float64 constant is bound again inside a definition that no rule wants: it is
    # no constant, and only the whole file shows that
    "constant rebound in a left-out definition": (
        "import torch\n\n_dtype = torch.float64\n\n\ndef reset():\n    _dtype = 3\n    return _dtype\n\n\n"
        "def stats(x):\n    return x.to(_dtype)\n", False),
    "constant bound once": (
        "import torch\n\n_dtype = torch.float64\n\n\ndef reset(y):\n    return y + 1\n\n\n"
        "def stats(x):\n    return x.to(_dtype)\n", True),
    # the array comes from a helper defined elsewhere in the module: the dtype search reads it
    "array from a module helper": (
        "import numpy as np\nimport torch\n\n\ndef noise(n):\n    return np.random.randn(n)\n\n\n"
        "def unrelated(y):\n    return y * 2\n\n\n"
        "def sample(n, device):\n    a = noise(n)\n    return torch.from_numpy(a).to(device)\n", False),
    # a field of the class, set in a method no rule wants
    "array from a field set in another method": (
        "import numpy as np\nimport torch\n\n\nclass Buffer:\n    def __init__(self, n):\n"
        "        self.obs = np.zeros((n, 3), dtype=np.float32)\n\n"
        "    def sample(self, idx, device):\n        return torch.from_numpy(self.obs[idx]).to(device)\n", False),
    # the dtype is in plain sight in the function: nothing else is read
    "array made in the function": (
        "import numpy as np\nimport torch\n\n\ndef unrelated(y):\n    return y * 2\n\n\n"
        "def sample(n, device):\n    a = np.zeros(n, dtype=np.float32)\n    return torch.from_numpy(a).to(device)\n", True),
}


@pytest.mark.parametrize("code,served", LAZY_WHOLE_FILE.values(), ids=list(LAZY_WHOLE_FILE))
def test_rules_ask_for_the_whole_file_only_when_their_answer_needs_it(code, served, monkeypatch):
    import porter.engine.stages.python_stage as stage

    passes = []
    real = stage._migrate
    monkeypatch.setattr(stage, "_migrate", lambda *a, **k: passes.append(a[-1] is not None) or real(*a, **k))
    assert _reduced(code, OPTIONS)
    with_segments = _run(code, OPTIONS, True)
    # the reduced module is tried first; the whole file is parsed only when a rule asked for it
    assert passes == ([True] if served else [True, False])
    assert with_segments == _run(code, OPTIONS, False)
