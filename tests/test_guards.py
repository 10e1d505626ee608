"""porter.rulebase.conditions.guards: which code only runs where CUDA is present, and the guard's line."""

import ast
from textwrap import dedent

import pytest

from porter.engine.process import Options, migrate_source
from porter.rulebase.conditions.guards import cuda_regions
from porter.engine.registry import all_rules


def guarded_lines(code: str) -> dict[int, tuple[int, str]]:
    """Line → (guard line, kind) for every line inside a region."""
    data = dedent(code).encode()
    found = {}
    for region in cuda_regions(ast.parse(data), data):
        for line in range(region.span[0][0], region.span[1][0] + 1):
            found.setdefault(line, (region.guard_line, region.kind))
    return found


@pytest.mark.parametrize("code,line,guard", [
    ("import torch\nif torch.cuda.is_available():\n    x = 1\n", 3, 2),
    ("import torch as t\nif t.cuda.is_available() and fast:\n    x = 1\n", 3, 2),
    ("from torch.cuda import is_available\nif is_available():\n    x = 1\n", 3, 2),
    ("if x.is_cuda:\n    y = 1\n", 2, 1),
    ("if device.type == 'cuda':\n    y = 1\n", 2, 1),
    ("if str(device).startswith('cuda'):\n    y = 1\n", 2, 1),
    ("if 'cuda' in str(device):\n    y = 1\n", 2, 1),
    ("import torch\nif torch.cuda.device_count() > 0:\n    y = 1\n", 3, 2),
    # the else of a negated test
    ("import torch\nif not torch.cuda.is_available():\n    y = 0\nelse:\n    y = 1\n", 5, 2),
    # the rest of the function after an early return off CUDA
    ("import torch\ndef f():\n    if not torch.cuda.is_available():\n        return None\n    a = 1\n    return a\n", 5, 3),
    ("import sys, torch\nif not torch.cuda.is_available():\n    sys.exit('needs a GPU')\nb = 1\n", 4, 2),
    ("import torch\nassert torch.cuda.is_available()\nb = 1\n", 3, 2),
    # a flag assigned once from a CUDA test
    ("import torch\nuse_cuda = torch.cuda.is_available()\nif use_cuda:\n    y = 1\n", 4, 3),
    ("import torch\nargs.cuda = not args.no_cuda and torch.cuda.is_available()\nif args.cuda:\n    y = 1\n", 4, 3),
])
def test_device_guards(code, line, guard):
    assert guarded_lines(code).get(line) == (guard, "device")


@pytest.mark.parametrize("code,line", [
    ("import torch\nif torch.cuda.is_available():\n    x = 1\nelse:\n    x = 2\n", 5),
    ("if device.type != 'cpu':\n    y = 1\n", 2),  # MPS too: not CUDA-only
    ("import torch\nif not torch.cuda.is_available():\n    print('cpu')\nb = 1\n", 4),  # no exit
    ("def f(torch):\n    if torch.cuda.is_available():\n        x = 1\n", 3),  # shadowed: not the module
    ("import mylib as torch\nif torch.cuda.is_available():\n    x = 1\n", 3),  # a lookalike
    ("import torch\nuse_cuda = torch.cuda.is_available()\nuse_cuda = False\nif use_cuda:\n    y = 1\n", 5),
    # a setting read from the environment says "cuda" on a Mac too (picotron's DEVICE)
    ("import os\nif os.getenv('DEVICE', 'cuda') == 'cuda':\n    y = 1\n", 3),
    ("import os\nif os.environ.get('DEVICE') == 'cuda':\n    y = 1\n", 3),
    ("from os import environ\nif environ['DEVICE'] == 'cuda':\n    y = 1\n", 3),
])
def test_not_guards(code, line):
    assert line not in guarded_lines(code)


def test_expression_guards_cover_only_the_cuda_arm():
    data = b"import torch\nx = t.cuda() if torch.cuda.is_available() else t\nok = torch.cuda.is_available() and f()\n"
    spans = sorted(r.span for r in cuda_regions(ast.parse(data), data))
    assert spans == [((2, 4), (2, 12)), ((3, 35), (3, 38))]


IMPORT_GUARD = """\
try:
    from flash_attn import flash_attn_func
    HAS_FLASH = True
except ImportError:
    HAS_FLASH = False

if HAS_FLASH:
    out = 1
"""


def test_import_guard_and_its_flag():
    found = guarded_lines(IMPORT_GUARD)
    assert found[2] == (1, "import") and found[3] == (1, "import")
    assert found[8] == (7, "import")


@pytest.mark.parametrize("code", [
    # an except that re-raises is not a guard
    "try:\n    import xformers\nexcept ImportError:\n    raise ImportError('xFormers is required')\n",
    # FlashAttention-3, else FlashAttention-2: CUDA either way
    "try:\n    from flash_attn_interface import flash_attn_func\nexcept ImportError:\n"
    "    from flash_attn import flash_attn_func\n",
    # not a CUDA-only module
    "try:\n    import yaml\nexcept ImportError:\n    yaml = None\n",
])
def test_not_import_guards(code):
    assert 2 not in guarded_lines(code)


def test_none_fallback_and_availability_function():
    code = """\
    try:
        from xformers.ops import memory_efficient_attention
    except ImportError:
        memory_efficient_attention = None

    def has_apex():
        try:
            import apex
            return True
        except ImportError:
            return False

    if memory_efficient_attention is not None:
        a = 1
    if has_apex():
        b = 1
    if is_flash_attn_2_available():
        c = 1
    """
    found = guarded_lines(code)
    assert found[14] == (13, "import") and found[16] == (15, "import") and found[18] == (17, "import")


def migrate(code: str) -> str:
    rules = [r for r in all_rules() if hasattr(r, "targets")]
    return migrate_source(dedent(code).encode(), Options(rules=rules)).new.decode()


def test_no_rewrite_inside_code_that_only_runs_on_cuda():
    code = """\
    import torch

    def step(x, device):
        if x.is_cuda:
            torch.cuda.synchronize()
        if device.type == "cuda":
            x = x.cuda()
        return x
    """
    assert migrate(code) == dedent(code)


def test_a_ported_guard_gets_its_body_ported():
    code = """\
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()
    """
    new = migrate(code)
    assert "porter_runtime.is_accelerator_available()" in new and "porter_runtime.synchronize()" in new


def test_rewrites_outside_the_guard_stay():
    code = """\
    import torch

    def step(x):
        if x.is_cuda:
            torch.cuda.synchronize()
        return x.cuda()
    """
    new = migrate(code)
    assert "torch.cuda.synchronize()" in new and "x.cuda()" not in new


def test_a_requirement_the_port_rewrote_ports_what_follows():
    """PT903 turns the early exit into porter_runtime.require_device(...): the rest of
    the function now runs on any device, so it is ported too."""
    code = """\
    import sys
    import torch

    def main():
        if not torch.cuda.is_available():
            sys.exit("needs a GPU")
        torch.cuda.synchronize()
    """
    new = migrate(code)
    assert "porter_runtime.require_device" in new and "porter_runtime.synchronize()" in new
