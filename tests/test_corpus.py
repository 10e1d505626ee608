"""A bounded slice of the real-world corpus run (bench/corpus.py runs all of it).

The slice: every file of two folders of the pinned transformers wheel, ``quantizers/``
and ``distributed/`` (41 files, 8 of which porter changes), well under a minute on
two cores. Skipped, with the reason, when the wheel can't be downloaded (no
network); the cache makes later runs offline.
"""

import importlib.util
import sys
from pathlib import Path

import pytest

_spec = importlib.util.spec_from_file_location("porter_bench_corpus", Path(__file__).parent.parent / "bench" / "corpus.py")
corpus = sys.modules.setdefault("porter_bench_corpus", importlib.util.module_from_spec(_spec))
_spec.loader.exec_module(corpus)

WHEEL = ("transformers", "5.23.0")
FOLDERS = ("transformers/quantizers/", "transformers/distributed/")


@pytest.mark.corpus
def test_corpus_slice(tmp_path):
    try:
        src = corpus.fetch(*WHEEL)
    except corpus.CorpusUnavailable as exc:
        pytest.skip(f"corpus wheel unavailable: {exc}")
    files = [rel for rel in corpus.python_files(src) if rel.startswith(FOLDERS)]
    assert len(files) > 40
    stats = corpus.run_corpus([("-".join(WHEEL), src, files)], jobs=2, scratch=tmp_path)
    print(stats.summary("==".join(WHEEL)))
    assert stats.ok, "\n".join(stats.details())
    assert stats.processed == len(files) and stats.changed >= 5


def test_literal_check_catches_rewrites_in_strings_and_comments():
    old = b'import torch\nx = torch.device("cuda")  # keep .cuda() here\ns = "x.cuda()"\n'
    good = b'import porter_runtime\nimport torch\nx = porter_runtime.device()  # keep .cuda() here\ns = "x.cuda()"\n'
    in_comment = good.replace(b"keep .cuda()", b"keep .to(porter_runtime.device())")
    in_string = good.replace(b'"x.cuda()"', b'"x.to(porter_runtime.device())"')
    allowed = corpus.runtime_import_literals()
    assert corpus.literal_violations(old, good, allowed) == []
    assert corpus.literal_violations(old, in_comment, allowed) == [
        "removed COMMENT '# keep .cuda() here'", "added COMMENT '# keep .to(porter_runtime.device()) here'"]
    assert len(corpus.literal_violations(old, in_string, allowed)) == 2
    docstring = b'"""Call x.cuda()."""\n' + old
    assert corpus.literal_violations(docstring, docstring.replace(b"x.cuda()", b"x.cpu()", 1), allowed)


def test_literal_check_treats_fstring_fields_as_code():
    old = b'import torch\nd = f"cuda:{torch.cuda.current_device()}"  # pick\n'
    new = b'import porter_runtime\nimport torch\nd = f"cuda:{porter_runtime.current_device()}"  # pick\n'
    allowed = corpus.runtime_import_literals()
    assert corpus.literal_violations(old, new, allowed) == []
    assert corpus.literal_violations(old, new.replace(b'f"cuda:', b'f"mps:'), allowed)
