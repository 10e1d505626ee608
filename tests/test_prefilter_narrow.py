"""Pre-filters narrowed for speed (issue 16) still pass every file their rule changes:
the output with the pre-filter equals the output without it."""

from textwrap import dedent

import pytest

from porter.engine.process import Options, migrate_source
from porter.engine.prefilter import candidate_rules
from porter.engine.registry import by_code


def _both_ways(code: str, rule_code: str):
    rule = by_code(rule_code)
    data = dedent(code).encode()
    filtered = migrate_source(data, Options(rules=[rule]))
    unfiltered = migrate_source(data, Options(rules=[rule]), candidates=([rule], None))
    return rule in candidate_rules(data, [rule])[0], filtered, unfiltered


@pytest.mark.parametrize("code,candidate,changed", [
    # device= of a name that is not an index: PT901 can't change it, the file is skipped
    ("import torch\ndef f(device):\n    return torch.zeros(2, device=device)\n", False, False),
    ("import torch\ndef f(local_rank):\n    return torch.zeros(2, device=local_rank)\n", True, True),
    ("import torch\nx = torch.zeros(2, device=0)\n", True, True),
    ("import torch\ndef f(args):\n    return torch.zeros(2, device=args.gpu)\n", True, True),
    # evidence elsewhere in the file: `.cuda(dev)` says dev is an index
    ("import torch\ndef f(dev, m):\n    m.cuda(dev)\n    return torch.zeros(2, device=dev)\n", True, True),
    # a name assigned an index in another function
    ("import torch\ndev = torch.cuda.current_device()\ndef f():\n    return torch.ones(1, device=dev)\n",
     True, True),
])
def test_pt901_device_keyword(code, candidate, changed):
    is_candidate, filtered, unfiltered = _both_ways(code, "PT901")
    assert is_candidate is candidate
    assert filtered.new == unfiltered.new
    assert (filtered.new != dedent(code).encode()) is changed


@pytest.mark.parametrize("code,candidate,changed", [
    ("import torch\nmodel = Net()\nmodel.load_state_dict(torch.load(path))\n", False, False),
    ("import torch\nmodel = torch.compile(Net())\nmodel.load_state_dict(torch.load(path))\n", True, True),
    ("import torch\nfrom torch.nn import DataParallel as DP\nif torch.cuda.device_count() > 1:\n"
     "    model = DP(model)\nmodel.load_state_dict(torch.load(path))\n", True, True),
])
def test_pt905_needs_a_wrapper_in_the_file(code, candidate, changed):
    is_candidate, filtered, unfiltered = _both_ways(code, "PT905")
    assert is_candidate is candidate
    assert filtered.new == unfiltered.new
    assert (filtered.new != dedent(code).encode()) is changed


def _findings(result):
    return [(f.code, f.line, f.column, f.message) for f in result.findings]


@pytest.mark.parametrize("rule_code,code,candidate,reported", [
    # PT605: a from_numpy tensor moved later, not in the same expression: skipped
    ("PT605", "import torch\nx = torch.from_numpy(a)\ny = x.to(device)\n", False, False),
    ("PT605", "import torch\nx = torch.from_numpy(a).float().cuda()\n", False, False),
    ("PT605", "import torch as t\ndef f(a):\n    return t.from_numpy(a).to(device)\n", True, True),
    ("PT605", "from torch import from_numpy as fn\nx = (fn(a)).cuda()\n", True, True),
    # ... its byte pattern scans the arguments two parentheses deep, passes the file at a
    # string, a comment or a deeper parenthesis, and sees through spacing
    ("PT605", "import torch\nx = torch.from_numpy(np.stack([f(a) for a in b])).to(dev)\n", True, True),
    ("PT605", "import torch\nx = torch.from_numpy(f(g(h(a)))).cuda()\n", True, True),
    ("PT605", "import torch\nx = torch.from_numpy(a  # a (n, d) array)\n).cuda()\n", True, True),
    ("PT605", "import torch\nx = torch.from_numpy(load(')'))  \\\n    .to(dev)\n", True, True),
    ("PT605", "import torch\nx = torch.from_numpy(np.zeros((2, 3))).float()\n", False, False),
    # PT905: a state dict loaded where nothing is compiled or wrapped: no parse
    ("PT905", "import torch\nm.load_state_dict(torch.load(p))\nn = torch.cuda.device_count()\n", False, False),
    # PT801: the byte stage wants a use the imports of torch can reach (prefilter.byte_stage._may_use):
    # the first name of the dotted name before `mode` bound by an import that mentions torch
    ("PT801", "import torch\nz = posterior.latent_dist.mode()\ny = F.interpolate(x, mode='nearest')\n", False, False),
    ("PT801", "import torch\nv = self.torch.mode(x)\n", False, False),
    ("PT801", "import torch\nv = torch.mode(x)\n", True, True),
    ("PT801", "import torch as th\nv = th.mode(x)\n", True, True),
    ("PT801", "from torch import mode\nv = mode(x)\n", True, True),
    ("PT801", "from torch import (\n    mode,\n)\nv = mode(x)\n", True, True),
    ("PT801", "import torch\nv = (torch\n     .mode(x))\n", True, True),
    ("PT801", "import torch\nv = torch . mode(x)\n", True, True),
    # a star import binds nothing porter can follow: neither stage nor the rule sees torch.mode
    ("PT801", "from torch import *\nv = mode(x)\n", False, False),
    ("PT801", "import torch.distributions as D\np = D.Poisson(rate)\n", True, True),
    ("PT801", "from torch \\\n    import distributions\np = distributions.Poisson(rate)\n", True, True),
    # TP701: a loader with no flash attention keyword or string: skipped
    ("TP701", "m = AutoModel.from_pretrained(name, attn_implementation='sdpa')\n", False, False),
    ("TP701", "m = AutoModel.from_pretrained(name)\nmode = 'flash_attention_2'\n", False, False),
    ("TP701", "m = AutoModel.from_config(c, attn_implementation='flash_attention_3')\n", True, True),
    ("TP701", "m = AutoModel.from_pretrained(p, use_flash_attention_2=True)\n", True, True),
    # TP702: from_pretrained with no device_map: skipped
    ("TP702", "m = AutoModel.from_pretrained(name, revision='main')\n", False, False),
    ("TP702", "def load(name):\n    return AutoModel.from_pretrained(name, device_map='cuda:1')\n", True, True),
    # TP703: a loader without load_in_4bit / load_in_8bit and no BitsAndBytesConfig: skipped
    ("TP703", "m = AutoModel.from_pretrained(name, torch_dtype='auto')\n", False, False),
    ("TP703", "import transformers as tf\nq = tf.BitsAndBytesConfig(load_in_4bit=True)\n", True, True),
    ("TP703", "m = AutoModel.from_pretrained(name, load_in_8bit=flag)\n", True, True),
])
def test_narrowed_filters_keep_what_the_rule_reports(rule_code, code, candidate, reported):
    is_candidate, filtered, unfiltered = _both_ways(code, rule_code)
    assert is_candidate is candidate
    assert filtered.new == unfiltered.new
    assert _findings(filtered) == _findings(unfiltered)
    assert bool(unfiltered.findings) is reported


_UNRELATED = "def unrelated(x):\n    y = x + 1\n    return y * 2\n\n\n"


@pytest.mark.parametrize("code,reported_lines", [
    # the import inside a function: only that function is parsed, the rest left out
    (_UNRELATED + "def init(cfg):\n    import deepspeed\n    return deepspeed.initialize(config=cfg)\n", [7]),
    # an xformers import used only in a left-out function: the whole file decides (used)
    ("import xformers\n\n\n" + _UNRELATED + "def attend(q):\n    return xformers.ops.unbind(q)\n", []),
    ("import xformers\n\n\n" + _UNRELATED, [1]),
    # a compiled extension used only in a CUDA branch of a left-out function: TP604's
    ("import torch\nimport rotary_emb\n\n\n" + _UNRELATED
     + "def rotate(x, c, s):\n    if x.is_cuda:\n        return rotary_emb.apply(x, c, s)\n    return x\n", []),
    ("import torch\nimport rotary_emb\n\n\n" + _UNRELATED + "def rotate(x, c, s):\n    return rotary_emb.apply(x, c, s)\n",
     [2]),
])
def test_tp603_segments_equal_the_whole_file(code, reported_lines):
    rule = by_code("TP603")
    data = code.encode()
    reduced = migrate_source(data, Options(rules=[rule]), segments=True)
    whole = migrate_source(data, Options(rules=[rule]), segments=False)
    assert reduced.new == whole.new == data
    assert _findings(reduced) == _findings(whole)
    assert [f.line for f in whole.findings] == reported_lines


@pytest.mark.parametrize("code,candidate,reported", [
    # the words alone (`cuda` is also cuda-python's package name): no import, skipped
    ("import torch\nx = torch.zeros(2, device='cuda')\nprint('nvidia driver')\n", False, False),
    ("import torch.cuda\nfrom torch import cuda\n", False, False),
    ("from .cupy import x\n", False, False),
    # every form of import statement TP603 reads
    ("import cupy\nx = cupy.zeros(3)\n", True, True),
    ("import os, cupy as cp\nx = cp.zeros(3)\n", True, True),
    ("import os, \\\n    cupy\nx = cupy.zeros(3)\n", True, True),
    ("from numba import cuda\n@cuda.jit\ndef k(a):\n    pass\n", True, True),
    ("def f():\n    from  deepspeed.ops.adam import FusedAdam\n    return FusedAdam\n", True, True),
    ("import flash_attn  # noqa\n", True, True),
])
def test_tp603_needs_an_import_statement(code, candidate, reported):
    is_candidate, filtered, unfiltered = _both_ways(code, "TP603")
    assert is_candidate is candidate
    assert _findings(filtered) == _findings(unfiltered)
    assert bool(filtered.findings) is reported
