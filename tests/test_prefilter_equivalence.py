"""The pre-filter and segments only save time: with both off, every rule sees every
file whole, and the diff and the report must be byte-identical to the default run.

In CI this runs on every fixture tree; ``bench/prefilter_equivalence.py`` runs it on
whole pinned wheels (transformers, diffusers, timm), and the corpus test below on a
slice of transformers.
"""

import importlib.util
import shutil
import sys
from pathlib import Path

import pytest

from porter_test_utils import FIXTURES

_spec = importlib.util.spec_from_file_location(
    "porter_bench_prefilter_equivalence", Path(__file__).parent.parent / "bench" / "prefilter_equivalence.py")
equivalence = sys.modules.setdefault("porter_bench_prefilter_equivalence", importlib.util.module_from_spec(_spec))
_spec.loader.exec_module(equivalence)

TREES = sorted(p for p in (FIXTURES / "repos").iterdir() if p.is_dir()) + [FIXTURES / "thirdparty", FIXTURES / "manifests"]


@pytest.mark.parametrize("tree", TREES, ids=lambda p: p.name)
def test_filters_change_nothing_on_fixture_trees(tree):
    found, _, _ = equivalence.compare(tree, jobs=1)
    assert found == []


def test_the_comparison_sees_a_difference(tmp_path):
    """The check itself can fail: a report that differs in one finding is caught."""
    diff = b"diff --git a/x.py b/x.py\n"
    report = {"summary": {"changed": 1}, "files": [{"path": "x.py", "rewrites": [{"code": "PT401", "line": 3}]}]}
    other = {"summary": {"changed": 1}, "files": [{"path": "x.py", "rewrites": []}]}
    assert equivalence.differences((diff, report), (diff, report)) == []
    assert equivalence.differences((diff, report), (diff, other)) == ["report differs for x.py"]
    assert equivalence.differences((diff, report), (b"", report)) == ["diffs differ (reports equal)"]


def test_save_on_cpu_pin_memory_is_ported_with_and_without_filters(tmp_path):
    """transformers' modeling_utils.py: `save_on_cpu(pin_memory=True, ...)` in a file
    with no DataLoader. Pinning needs CUDA, so both paths port it (it used to be left
    alone with the pre-filter on and rewritten with it off)."""
    (tmp_path / "offload.py").write_text(
        "import torch\nfrom torch.autograd.graph import save_on_cpu\n\n\n"
        "def forward(model, x):\n"
        "    with save_on_cpu(pin_memory=True, device_type=x.device.type):\n"
        "        return model(x)\n"
    )
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    found, _, _ = equivalence.compare(tmp_path, jobs=1)
    assert found == []
    diff, report, _ = equivalence.migrate(tmp_path, tmp_path / "out", {}, jobs=1)
    assert b"+    with save_on_cpu(pin_memory=porter_runtime.pin_memory(), device_type=x.device.type):" in diff
    assert [r["code"] for f in report["files"] for r in f["rewrites"]] == ["PT401"]


@pytest.mark.corpus
def test_filters_change_nothing_on_a_transformers_slice(tmp_path):
    corpus = equivalence.corpus
    try:
        src = corpus.fetch("transformers", "5.23.0")
    except corpus.CorpusUnavailable as exc:
        pytest.skip(f"corpus wheel unavailable: {exc}")
    picked = [rel for rel in corpus.python_files(src)
              if rel.startswith(("transformers/quantizers/", "transformers/distributed/", "transformers/integrations/"))]
    assert len(picked) > 60
    for rel in picked:
        (tmp_path / "tree" / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src / rel, tmp_path / "tree" / rel)
    (tmp_path / "tree" / "setup.py").write_text("")
    found, _, _ = equivalence.compare(tmp_path / "tree", jobs=2)
    assert found == []
