"""The code view (porter/rulebase/codeview.py): comments and prose strings out, nothing else.

A file whose every CUDA word sits in a docstring's example or a comment needs no parse:
the pre-filter and the ledger say "nothing here" from the view. These tests hold the
view to Python's own tokenizer on every Python file of the repository, and check that
such a file is ported the same with the pre-filter off.
"""

import io
import re
import tokenize

import pytest

from porter.project.touchpoints import ledger
from porter.rulebase.codeview import code_view
from porter.engine.process import Options, migrate_source
from porter.engine.prefilter import byte_candidates, candidate_rules
from porter.engine.registry import all_rules
from porter.rulebase.rule import Rule
from porter_test_utils import ROOT

SOURCE_RULES = [r for r in all_rules() if issubclass(r, Rule)]


@pytest.mark.parametrize("before,after", [
    (b"x = 1  # x.cuda()\n", b"x = 1  \n"),
    (b'"""Example:\n    pipe.to("cuda")\n"""\nimport os\n', b'""\nimport os\n'),
    (b"s = '''two words\nand a line'''\n", b's = ""\n'),
    # A one-line string, a multi-line string with no space between words and an
    # f-string are kept: each may be a device name or hold code.
    (b'd = "cuda:0 here"  # c\n', b'd = "cuda:0 here"  \n'),
    (b'd = """cuda\n"""\n', b'd = """cuda\n"""\n'),
    (b'x = f"""{torch.cuda.current_device()}\n is the device"""\n',
     b'x = f"""{torch.cuda.current_device()}\n is the device"""\n'),
    # Quotes and hashes inside strings, escapes, prefixes.
    (b's = "a # b"\nq = \'"""\'\nz = 1  # """\n', b's = "a # b"\nq = \'"""\'\nz = 1  \n'),
    (b'x = r"\\"" + "q"  # c\n', b'x = r"\\"" + "q"  \n'),
    (b"x = f'{{literal}}'\n", b"x = f'{{literal}}'\n"),
    (b'x = f"{path:<{width}}"  # a nested format spec\n', b'x = f"{path:<{width}}"  \n'),
])
def test_the_view_drops_comments_and_prose_strings_only(before, after):
    assert code_view(before) == after


@pytest.mark.parametrize("source", [
    b'x = "unterminated\n',
    b"x = '''never closed\n",
    b'x = f"{d["k"]}"  # Python 3.12 nests quotes: the lexing would end the string early\n',
    b'x = f"{d["#"]} {torch.cuda.x()}"\n',
])
def test_bytes_it_cannot_lex_give_no_view(source):
    assert code_view(source) is None


def _tokens(data: bytes):
    """Python's tokens of ``data`` that the view must keep (each prose string as
    ``""`` after its prefix), or None when Python can't tokenize it."""
    out = []
    try:
        for tok in tokenize.tokenize(io.BytesIO(data).readline):
            if tok.type == tokenize.STRING and _prose(tok.string):
                out.append((tok.type, re.match(r"[A-Za-z]*", tok.string).group() + '""'))  # r"""...""" → r""
            elif tok.type in (tokenize.NAME, tokenize.NUMBER, tokenize.OP, tokenize.STRING, tokenize.ERRORTOKEN):
                out.append((tok.type, tok.string))
    except (tokenize.TokenError, SyntaxError, UnicodeDecodeError, LookupError):
        return None
    return out


def _prose(string: str) -> bool:
    prefix = re.match(r"[A-Za-z]*", string).group()
    body = string[len(prefix):]
    if "f" in prefix.lower() or not body.startswith(('"""', "'''")):
        return False
    text = body[3:-3]
    return "\n" in text and re.search(r"\S\s+\S", text) is not None


def _python_files():
    return sorted(p for folder in ("fixtures", "src", "tests", "bench")
                  for p in (ROOT / folder).rglob("*.py") if p.is_file() and not p.is_symlink())


def test_the_view_keeps_every_token_python_sees_on_every_file_here():
    """Against ``tokenize`` on this repository's Python files (the fixtures are research
    code in many styles): the same names, numbers, operators and strings, less the
    comments, each prose string as ``""``."""
    compared = changed = 0
    for path in _python_files():
        data = path.read_bytes()
        expected = _tokens(data)
        if expected is None:
            continue
        view = code_view(data)
        assert view is not None, path
        assert _tokens(view) == expected, path
        compared += 1
        changed += view != data
    assert compared > 200 and changed > 150


DOCSTRING_ONLY = b'''"""Run the pipeline.

Example:
    >>> pipe = Pipeline.from_pretrained("x", torch_dtype=torch.bfloat16)
    >>> pipe.to("cuda")
    >>> torch.cuda.synchronize()
"""
import torch

EXAMPLE = """
    >>> model.cuda()
    >>> torch.backends.cudnn.benchmark = True
"""


def run(pipe, x):
    # was: x = x.cuda(); torch.cuda.empty_cache()
    return pipe(x.to(torch.float32))
'''


def test_a_file_with_cuda_only_in_docstrings_and_comments_is_not_parsed():
    assert byte_candidates(DOCSTRING_ONLY, SOURCE_RULES)  # the raw bytes hold the words
    assert candidate_rules(DOCSTRING_ONLY, SOURCE_RULES) == ([], None)
    assert ledger.trigger_lines(DOCSTRING_ONLY, ledger.TreeContext())
    assert ledger.account(DOCSTRING_ONLY, "pipe.py", ()) == []


def test_the_same_code_outside_the_docstring_is_ported():
    code = DOCSTRING_ONLY + b"\n\ndef warm(model):\n    torch.cuda.synchronize()\n    return model.cuda()\n"
    rules, facts = candidate_rules(code, SOURCE_RULES)
    assert rules and facts is not None
    assert ledger.account(code, "pipe.py", ())


def test_the_answer_is_the_same_with_the_pre_filter_off(monkeypatch):
    options = Options(rules=list(all_rules()))
    on = migrate_source(DOCSTRING_ONLY, options)
    monkeypatch.setenv("PORTER_PREFILTER", "0")
    off = migrate_source(DOCSTRING_ONLY, options)
    assert (on.new, on.findings) == (off.new, off.findings) == (DOCSTRING_ONLY, [])
    # With the pre-filter off the ledger parses the file and finds nothing either.
    assert ledger.account(DOCSTRING_ONLY, "pipe.py", ()) == []
