"""fla-org/native-sparse-attention (NSA): the README's commands, tiny.

The README's "Usage" runs ``pytest tests/test_nsa.py`` (parallel_nsa, the Triton selected-attention kernel, against
naive_nsa, its PyTorch reference; fixed and variable lengths), ``pytest tests/test_nsa_with_compression.py`` (the
compression + top-k selection path against naive_nsa_with_compression), ``python benchmarks/benchmark_nsa.py`` and a
"direct use" snippet of ``parallel_nsa`` with ``device='cuda'``; training is ``bash train.sh`` (flame + torchtitan).

The repository at HEAD (bd67af5) has not followed its own API change ed321e4 ("Merge `parallel_nsa` with
`parallel_nsa_with_compression`", 2025-03-14): parallel_nsa takes a required ``g_cmp``, which tests/test_nsa.py and the
README snippet do not pass (TypeError on CUDA too), and tests/test_nsa_with_compression.py imports
``parallel_nsa_with_compression``, which no longer exists (ImportError at collection, on CUDA too). prepare() therefore
writes the two test files, read from the tree being run (the original or the port, so porter's rewrites of them are
what runs), into ``_gauntlet/tests/`` with only these non-CUDA fixes:

- test_nsa.py: ``g_cmp=None`` passed to the two ``parallel_nsa`` calls (no compression branch: what the test compares
  with naive_nsa);
- test_nsa_with_compression.py: ``parallel_nsa`` (with the test's own g_cmp) for ``parallel_nsa_with_compression``,
  its output only (the merged function returns no top-k indices; the line printing the top-k mismatch goes), and
  ``x = ....clone().requires_grad_(True).cuda()`` made ``....clone().cuda().requires_grad_(True)`` so that q/k/v
  are leaves whose ``.grad`` the test reads (as written, ``.cuda()`` after requires_grad_ gives non-leaf copies and
  ``q.grad.clone()`` fails on CUDA too).

Each runs one parametrisation of the tests' own lists (the smallest T and D, window_size 0; -k would select the same).
The README snippet is written as ``_gauntlet/readme_usage.py``: the README's code with its device left out (the file
is written after porting, so porter never sees it: it is the user's code, and its tensors are created where torch puts
them, as in the flash-linear-attention entry), the names it leaves undefined (torch, dtype, S) defined as the tests
define them, ``triton.cdiv`` (the README imports no triton either) spelt as integer arithmetic, ``g_cmp=None`` added to
its two calls, and T shrunk (2048 -> 128, B 4 -> 2); window_size 64 as the README has it (the sliding branch is
flash-attn's). (The first version kept ``device='cuda'`` and ``import triton``, which no port can reach in a file
written after porting: changed after the first run, where the recipe stopped at its first step anyway.)

Not run: benchmarks/benchmark_nsa.py has no options (its shapes, B=4, HQ=64, D=128, T from 1024 to 32768, are fixed in
the function body) and times flash-attn beside NSA with triton.testing.do_bench; train.sh needs flame, a submodule
whose pinned commit (b3c9e30) is in no snapshot we have, plus torchtitan and an 8-GPU torchrun.

fla: the repository imports ``fla`` (flash-linear-attention) from a git submodule (3rdparty/flash-linear-attention at
7a21647, reached by the ``fla`` symlinks at the root, in tests/ and benchmarks/), which the snapshot does not hold (the
symlinks dangle). prepare() installs PyPI's ``flash-linear-attention==0.1`` (the first release after 7a21647: tag
v0.1.0, 17 commits later, 2025-03-20) with pip's ``--no-deps``: its requirements are torch, transformers, triton,
datasets, einops, ninja, and triton has no macOS build (and none comes with torch's CPU wheel), so it is left out, as
on a Mac; transformers and einops are in the entry's list, datasets and ninja are used by nothing the recipe runs.
fla is therefore not ported (it is a dependency here, not this repository's code).
"""

import re
from pathlib import Path

from _recipe import Step

G = "_gauntlet"
ENV = {"PYTHONPATH": ".", "TOKENIZERS_PARALLELISM": "false"}
FLA = "flash-linear-attention==0.1"

USAGE = '''\
# README "To direct use our NSA kernel" (the recipe's copy, written after porting, so never ported): the README's
# code with its device left out (the tensors are created where torch puts them: this file is the user's, not the
# repository's), the names it leaves undefined (torch, dtype, S) defined as tests/test_nsa.py defines them,
# triton.cdiv (triton is not imported by the README either) spelt as integer arithmetic, g_cmp=None added to the two
# parallel_nsa calls (HEAD's signature), T 2048 -> 128 and B 4 -> 2.
import torch

from native_sparse_attention.ops.parallel import parallel_nsa


def cdiv(a, b):  # triton.cdiv
    return -(-a // b)


dtype = torch.bfloat16
S = 16
torch.manual_seed(0)

B, T, H, HQ, D = 2, 128, 4, 64, 64
block_size = 64
window_size = 64

q = torch.randn((B, T, HQ, D), dtype=dtype).requires_grad_(True)
k = torch.randn((B, T, H, D), dtype=dtype).requires_grad_(True)
v = torch.randn((B, T, H, D), dtype=dtype).requires_grad_(True)
g_slc = torch.rand((B, T, HQ), dtype=dtype).requires_grad_(True)
g_swa = torch.rand((B, T, HQ), dtype=dtype).requires_grad_(True)

# randomly generated block indices
block_indices = torch.full((B, T, H, S), T, dtype=torch.long)
for b in range(B):
    for t in range(T):
        for h in range(H):
            i_i = torch.randperm(max(1, cdiv(t, block_size)))[:S]
            block_indices[b, t, h, :len(i_i)] = i_i
block_indices = block_indices.sort(-1)[0]
block_counts = torch.randint(1, S + 1, (B, T, H))

o = parallel_nsa(
    q=q,
    k=k,
    v=v,
    g_cmp=None,
    g_slc=g_slc,
    g_swa=g_swa,
    block_indices=block_indices,
    block_counts=block_counts,
    block_size=block_size,
    window_size=window_size,
)
assert o.shape == (B, T, HQ, D), o.shape
assert torch.isfinite(o.float()).all()
print("parallel_nsa", tuple(o.shape), o.float().abs().mean().item())

# variable-length inputs are supported as well
# randomly split the sequence into N segments
N, T = 4, 128
offsets = torch.cat([
    torch.tensor([0], dtype=torch.long),
    torch.arange(16, T)[torch.randperm(T - 1)[:N-1]],
    torch.tensor([T], dtype=torch.long)
], 0).sort()[0]
# seq-first required for inputs with variable lengths
q = torch.rand((1, T, HQ, D), dtype=dtype).requires_grad_(True)
k = torch.rand((1, T, H, D), dtype=dtype).requires_grad_(True)
v = torch.rand((1, T, H, D), dtype=dtype).requires_grad_(True)
g_slc = torch.rand((B, T, HQ), dtype=dtype).requires_grad_(True)
g_swa = torch.rand((B, T, HQ), dtype=dtype).requires_grad_(True)

# randomly generated block indices
block_indices = torch.full((B, T, H, S), T, dtype=torch.long)
for b in range(B):
    for t in range(T):
        for h in range(H):
            i_i = torch.randperm(max(1, cdiv(t, block_size)))[:S]
            block_indices[b, t, h, :len(i_i)] = i_i
block_indices = block_indices.sort(-1)[0]
block_counts = torch.randint(1, S + 1, (B, T, H))

o = parallel_nsa(
    q=q,
    k=k,
    v=v,
    g_cmp=None,
    g_slc=g_slc,
    g_swa=g_swa,
    block_indices=block_indices,
    block_counts=block_counts,
    block_size=block_size,
    window_size=window_size,
    cu_seqlens=offsets
)
assert torch.isfinite(o.float()).all()
print("parallel_nsa varlen", tuple(o.shape), o.float().abs().mean().item())
'''


def _ensure_fla() -> None:
    """flash-linear-attention 0.1 beside torch 2.13, without its triton (see the docstring)."""
    import importlib.metadata
    import subprocess
    import sys

    try:
        if importlib.metadata.version("flash-linear-attention") == "0.1":
            return
    except importlib.metadata.PackageNotFoundError:
        pass
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", FLA], check=True)


def _sub(text: str, pattern: str, replacement: str, count: int, flags: int = 0) -> str:
    new, n = re.subn(pattern, replacement, text, flags=flags)
    if n != count:
        raise RuntimeError(f"recipe: expected {count} match(es) of {pattern!r}, found {n}")
    return new


def _test_nsa(text: str) -> str:
    # HEAD's parallel_nsa requires g_cmp; None is the selected(+sliding) attention the test compares with naive_nsa
    return _sub(text, r"(tri = parallel_nsa\(\n(\s*))", r"\1g_cmp=None,\n\2", 2)


def _test_nsa_with_compression(text: str) -> str:
    text = _sub(text, r"import parallel_nsa_with_compression\b", "import parallel_nsa", 1)
    text = _sub(text, r"tri, tri_topk = parallel_nsa_with_compression\(", "tri = parallel_nsa(", 1)
    text = _sub(text, r"\n[ \t]*print\(\(ref_topk != tri_topk.*\n", "\n", 1)
    # q/k/v leaves: requires_grad_ after the move, whatever the move is spelt as
    text = _sub(text, r"^(\s*[qkv] = .*\.clone\(\))\.requires_grad_\(True\)(.+)$", r"\1\2.requires_grad_(True)", 3,
                flags=re.M)
    return text


def prepare(tree: Path) -> None:
    _ensure_fla()
    tree = Path(tree)
    tests = tree / G / "tests"
    tests.mkdir(parents=True, exist_ok=True)
    (tests / "test_nsa.py").write_text(_test_nsa((tree / "tests" / "test_nsa.py").read_text()))
    (tests / "test_nsa_with_compression.py").write_text(
        _test_nsa_with_compression((tree / "tests" / "test_nsa_with_compression.py").read_text()))
    (tree / G / "readme_usage.py").write_text(USAGE)


PYTEST = "python -m pytest -x -q -p no:cacheprovider -s"
# ids: the parametrize decorators innermost first (scale, dtype, window_size, block_size, S, D, HQ, H, T, B / N)
FIXED = "0.1-dtype0-0-32-16-64-64-4-256-1"
VARLEN = "dtype0-0-32-16-64-64-4-64-4"

STEPS = [
    # README: pytest tests/test_nsa.py -- parallel_nsa vs naive_nsa, forward and backward, T=256 D=64 window 0
    Step("test-nsa", f"{PYTEST} '{G}/tests/test_nsa.py::test_parallel[{FIXED}]'", env=ENV, timeout=900),
    # the same file's variable-length test, T=64 in 4 segments
    Step("test-nsa-varlen", f"{PYTEST} '{G}/tests/test_nsa.py::test_parallel_varlen[{VARLEN}]'", env=ENV,
         timeout=900),
    # README: pytest tests/test_nsa_with_compression.py -- compression + top-k selection vs the naive reference
    Step("test-nsa-with-compression", f"{PYTEST} '{G}/tests/test_nsa_with_compression.py::test_parallel[{FIXED}]'",
         env=ENV, timeout=900),
    # README: "To direct use our NSA kernel" (fixed and variable lengths, window_size 64)
    Step("readme-usage", f"python {G}/readme_usage.py", env=ENV, timeout=900),
]
