"""Tests that only run where CUDA is: the decorators and markers that skip them elsewhere.

A test class or function under ``@unittest.skipIf(not torch.cuda.is_available(), ...)``,
``@unittest.skipUnless(torch.cuda.is_available(), ...)``, ``@pytest.mark.skipif(not
torch.cuda.is_available(), ...)`` or a CUDA-only test decorator of torch's own test
helpers (``skip_if_lt_x_gpu(4)``, ``requires_nccl()``, ``onlyCUDA``) is skipped off CUDA, and
one the project tags as a GPU test (``@pytest.mark.gpu``) runs only where it selects those:
nothing in it runs on a Mac, so nothing in it needs porting or a human there, as a
module whose ``pytestmark`` skips it off CUDA. porter.rulebase.conditions.guards turns each into a
region of kind ``"test"``.
"""

from __future__ import annotations

import ast
import fnmatch
import re
from typing import Callable, Optional

from porter.rulebase.matching import ast_dotted_name

#: Test decorators (by their last name) that skip a test where CUDA (or enough CUDA
#: GPUs, or NCCL) is missing: torch.testing._internal's, and the usual spellings of
#: projects' own.
_CUDA_ONLY_DECORATOR = re.compile(
    r"^(?:skip_if_lt_x_gpu|skip_if_no_gpu|skip_if_no_cuda|skipIfNoCuda|skipIfNoCUDA|skip_but_pass_in_sandcastle_if_no_gpu"
    r"|requires_nccl|requires_cuda|requires_gpu|requires_multi_gpu|onlyCUDA|cuda_only|gpu_only)$")

#: pytest markers by which a project tags its GPU tests (``@pytest.mark.gpu``, deselected by
#: llm-foundry's and OLMo's ``addopts = "-m 'not gpu'"``; whisper's ``requires_cuda``): the
#: project says the test needs a GPU, so what it does there is CUDA's.
_GPU_MARK = re.compile(r"^(?:gpu|gpus|cuda|multi_?gpu|multigpus|requires_?gpus?|requires_?cuda|gpu_only|cuda_only)$")

def is_test_path(rel: str) -> bool:
    """Whether a file (its path in the tree, ``/``-separated) is test code: ``test_*.py``,
    ``*_test.py``, ``conftest.py``, or anything under a ``tests`` / ``test`` folder."""
    parts = rel.replace("\\", "/").split("/")
    name = parts[-1]
    return (fnmatch.fnmatch(name, "test_*.py") or fnmatch.fnmatch(name, "*_test.py") or name == "conftest.py"
            or any(p in ("tests", "test") for p in parts[:-1]))


#: (polarity of a test expression, as GuardFinder.polarity gives it) -> None
Polarity = Callable[[ast.AST], Optional[tuple]]


def _last_name(node: ast.AST) -> str:
    name = ast_dotted_name(node.func if isinstance(node, ast.Call) else node) or ""
    return name.rsplit(".", 1)[-1]


def cuda_only_marker(marker: ast.AST, polarity: Polarity) -> Optional[tuple]:
    """The polarity found in a decorator (or a ``pytestmark`` value) that runs the test
    only where CUDA is, or None: ``skipIf``/``skipif`` of a test that holds only
    without CUDA, ``skipUnless`` of one that holds only with it, a CUDA-only decorator."""
    last = _last_name(marker)
    if isinstance(marker, ast.Call) and marker.args and last in ("skipIf", "skipif", "skipUnless"):
        found = polarity(marker.args[0])
        if found is not None and found[0] is (last == "skipUnless"):
            return (True,) + tuple(found[1:])
        return None
    if _CUDA_ONLY_DECORATOR.match(last):
        return True, "test", ()
    dotted = ast_dotted_name(marker.func if isinstance(marker, ast.Call) else marker) or ""
    if _GPU_MARK.match(last) and dotted.startswith(("pytest.mark.", "mark.")):
        return True, "test", ()
    return None


def gated_definition(node: ast.stmt, polarity: Polarity) -> Optional[tuple]:
    """A class or function whose decorators skip it off CUDA: the polarity found, else None."""
    if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return None
    for decorator in node.decorator_list:
        found = cuda_only_marker(decorator, polarity)
        if found is not None:
            return found
    return None


def gated_module(tree: ast.Module, polarity: Polarity) -> Optional[ast.stmt]:
    """The module-level ``pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), ...)``
    (or a list holding one) that skips the whole file off CUDA, else None."""
    for stmt in tree.body:
        if not (isinstance(stmt, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "pytestmark"
                                                     for t in stmt.targets)):
            continue
        values = stmt.value.elts if isinstance(stmt.value, (ast.List, ast.Tuple)) else [stmt.value]
        if any(cuda_only_marker(v, polarity) is not None for v in values):
            return stmt
    return None


#: What a test mocks when it stands CUDA or a process group in (by the patched name's last part).
_MOCKED_ENTRY_POINTS = frozenset({
    "is_available", "set_device", "device_count", "current_device", "init_process_group", "DDP",
    "DistributedDataParallel", "FSDP", "FullyShardedDataParallel", "fully_shard", "init_device_mesh",
})


def _patched(decorator: ast.AST) -> Optional[str]:
    """The name a ``@patch("a.b.c")`` / ``@patch.object(module, "c")`` decorator mocks."""
    if not isinstance(decorator, ast.Call) or not decorator.args:
        return None
    name = ast_dotted_name(decorator.func) or ""
    if name.rsplit(".", 1)[-1] == "patch" and isinstance(decorator.args[0], ast.Constant):
        value = decorator.args[0].value
        return value if isinstance(value, str) else None
    if name.endswith("patch.object") and len(decorator.args) > 1 and isinstance(decorator.args[1], ast.Constant):
        value = decorator.args[1].value
        return value if isinstance(value, str) else None
    return None


def mocks_cuda(node: ast.stmt) -> Optional[int]:
    """The line of the decorator by which a test function mocks CUDA or the process group
    (``@patch("torch.cuda.is_available", return_value=True)``, ``@patch("pkg.parallel.DDP")``),
    or None: what such a test hands CUDA ("nccl", ``device_ids=[2]``) reaches the mock."""
    if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return None
    for decorator in node.decorator_list:
        target = _patched(decorator)
        if target and (target.startswith("torch.cuda.") or target.rsplit(".", 1)[-1] in _MOCKED_ENTRY_POINTS):
            return decorator.lineno
    return None


#: A count of GPUs (``opts.num_gpus``, ``n_gpu``, ``args.ngpus``): more than one means
#: several CUDA devices, and a Mac has one GPU, so code run only then is CUDA's.
_GPU_COUNT = re.compile(r"^(?:num_gpus?|n_gpus?|ngpus?|gpu_count|num_devices_gpu)$")


def several_gpus(left: ast.AST, op: ast.cmpop, right: ast.AST) -> Optional[bool]:
    """``num_gpus > 1`` (True), ``num_gpus == 1`` / ``<= 1`` / ``< 2`` (False), else None."""
    name = left.attr if isinstance(left, ast.Attribute) else getattr(left, "id", "")
    if not _GPU_COUNT.match(name) or not isinstance(right, ast.Constant) or type(right.value) is not int:
        return None
    return several_count(op, right.value)


def several_count(op: ast.cmpop, n: int) -> Optional[bool]:
    """``count > 1`` / ``>= 2`` (True), ``== 1`` / ``<= 1`` / ``< 2`` (False), else None."""
    if (isinstance(op, ast.Gt) and n >= 1) or (isinstance(op, ast.GtE) and n >= 2):
        return True
    if (isinstance(op, ast.Eq) and n == 1) or (isinstance(op, ast.LtE) and n == 1) or (isinstance(op, ast.Lt) and n == 2):
        return False
    return None
