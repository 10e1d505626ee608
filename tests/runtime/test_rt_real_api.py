"""The stand-ins against the real libraries' public Python API.

The pinned releases are fetched with ``pip download --no-deps`` into a cache
(``$PORTER_TEST_CACHE``, default ``~/.cache/porter-tests``) and read with ``ast``;
nothing of them is imported or committed. Every public function, class, method and
(dataclass) constructor of what porter_runtime mirrors must exist in the stand-in
with a compatible signature: the same positional parameters in the same order,
every keyword the library takes, and the library's defaults.

apex is not on PyPI (the ``apex`` there is an unrelated Pyramid toolkit) and has no
releases, so it cannot be checked this way; tests/runtime/test_rt_thirdparty.py
checks its stand-ins against apex's update rules instead.
"""
from __future__ import annotations

import ast
import inspect
import os
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path
from typing import Any, Callable, Optional

import pytest
import torch

import porter_runtime
from porter_runtime import xformers_bias
from porter_runtime.thirdparty import bnb as _thirdparty_bnb

pytestmark = pytest.mark.corpus

PINS = {"flash-attn": "2.8.3", "xformers": "0.0.35", "bitsandbytes": "0.50.2",
        "adam-atan2": "0.0.3"}
# flash-attn ships only an sdist whose setup.py builds CUDA code unless told not to.
_ENV = {"FLASH_ATTENTION_SKIP_CUDA_BUILD": "TRUE", "XFORMERS_DISABLE_FLASH_ATTN": "1"}


def _cache() -> Path:
    root = os.environ.get("PORTER_TEST_CACHE") or Path.home() / ".cache" / "porter-tests"
    return Path(root) / "real-api"


def _download(package: str) -> Path:
    """The pinned release's wheel or sdist (downloaded once), or skip with the reason."""
    version = PINS[package]
    folder = _cache() / f"{package}-{version}"
    found = sorted(folder.glob("*.whl")) + sorted(folder.glob("*.tar.gz"))
    if found:
        return found[0]
    folder.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "-d",
               str(folder), f"{package}=={version}"]
    if package == "flash-attn":  # its setup.py needs torch, from this environment
        command.insert(5, "--no-build-isolation")
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=600,
                              env={**os.environ, **_ENV})
    except (OSError, subprocess.TimeoutExpired) as exc:
        pytest.skip(f"cannot download {package}=={version}: {exc}")
    found = sorted(folder.glob("*.whl")) + sorted(folder.glob("*.tar.gz"))
    if not found:
        pytest.skip(f"cannot download {package}=={version}: {done.stderr.strip()[-300:]}")
    return found[0]


def _source(package: str, path: str) -> ast.Module:
    """``path`` (inside the package, e.g. 'flash_attn/flash_attn_interface.py') parsed."""
    archive = _download(package)
    if archive.suffix == ".whl":
        with zipfile.ZipFile(archive) as whl:
            text = whl.read(path).decode()
    else:
        with tarfile.open(archive) as sdist:
            member = next(m for m in sdist.getmembers() if m.name.split("/", 1)[-1] == path)
            text = sdist.extractfile(member).read().decode()  # type: ignore[union-attr]
    return ast.parse(text)


# --- signatures -----------------------------------------------------------------------

Param = tuple[str, str, Any]  # name, kind ("pos", "kw", "var"), default (or _NONE)
_NONE = object()


def _literal(node: Optional[ast.expr]) -> Any:
    if node is None:
        return _NONE
    try:
        return ast.literal_eval(node)
    except ValueError:
        return ast.unparse(node)  # e.g. torch.float32: compared as text


def _params(fn: ast.FunctionDef, drop_first: bool) -> list[Param]:
    args = fn.args
    positional = args.posonlyargs + args.args
    defaults = [None] * (len(positional) - len(args.defaults)) + list(args.defaults)
    out: list[Param] = [(a.arg, "pos", _literal(d)) for a, d in zip(positional, defaults)]
    out += [(a.arg, "kw", _literal(d)) for a, d in zip(args.kwonlyargs, args.kw_defaults)]
    out += [("*", "var", _NONE)] if args.vararg else []
    out += [("**", "var", _NONE)] if args.kwarg else []
    return out[1:] if drop_first else out


def _twin_params(fn: Callable[..., Any]) -> list[Param]:
    kinds = {inspect.Parameter.POSITIONAL_ONLY: "pos", inspect.Parameter.POSITIONAL_OR_KEYWORD:
             "pos", inspect.Parameter.KEYWORD_ONLY: "kw"}
    out: list[Param] = []
    for p in inspect.signature(fn).parameters.values():
        if p.kind in kinds:
            default = _NONE if p.default is inspect.Parameter.empty else p.default
            out.append((p.name, kinds[p.kind], default))
        else:
            out.append(("*" if p.kind is inspect.Parameter.VAR_POSITIONAL else "**", "var", _NONE))
    return out


def _same_default(real: Any, twin: Any) -> bool:
    if isinstance(real, str) and not isinstance(twin, str):
        return real.split(".")[-1] == str(twin).split(".")[-1]
    if isinstance(real, tuple) and isinstance(twin, (tuple, list)):
        return tuple(real) == tuple(twin)
    return real == twin or (real is _NONE and twin is _NONE)


def incompatibilities(real: list[Param], twin: list[Param]) -> list[str]:
    """What a call written for ``real`` could do that ``twin`` does not accept alike."""
    problems = []
    twin_pos = [p for p in twin if p[1] == "pos"]
    by_name = {p[0]: p for p in twin}
    catch_all = "**" in by_name
    for index, (name, kind, default) in enumerate(p for p in real if p[1] == "pos"):
        if index >= len(twin_pos) or twin_pos[index][0] != name:
            if "*" not in by_name:
                problems.append(f"positional #{index} is {name!r}")
    for name, kind, default in real:
        if kind == "var":
            if name not in by_name:
                problems.append(f"takes {name}")
            continue
        mine = by_name.get(name)
        if mine is None:
            if not catch_all:
                problems.append(f"lacks {name!r}")
            continue
        if default is not _NONE and not _same_default(default, mine[2]):
            problems.append(f"{name!r} defaults to {mine[2]!r}, not {default!r}")
    real_names = {p[0] for p in real}
    for name, kind, default in twin:
        if kind != "var" and default is _NONE and name not in real_names:
            problems.append(f"requires {name!r}, which the library does not have")
    return problems


# --- classes --------------------------------------------------------------------------

def _classes(tree: ast.Module) -> dict[str, ast.ClassDef]:
    return {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}


def _is_dataclass(cls: ast.ClassDef) -> bool:
    return any(ast.unparse(d).split("(")[0].endswith("dataclass") for d in cls.decorator_list)


def _chain(name: str, classes: dict[str, ast.ClassDef]) -> list[ast.ClassDef]:
    """The class and its bases defined in the same file, most derived first."""
    out, todo = [], [name]
    while todo:
        cls = classes.get(todo.pop(0))
        if cls is not None and cls not in out:
            out.append(cls)
            todo += [ast.unparse(b).split(".")[-1] for b in cls.bases]
    return out


def _fields(chain: list[ast.ClassDef]) -> list[Param]:
    fields: dict[str, Param] = {}
    for cls in reversed(chain):
        if not _is_dataclass(cls):
            continue
        for node in cls.body:
            if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                name = node.target.id
                fields[name] = (name, "pos", _literal(node.value))
    return list(fields.values())


def public_api(tree: ast.Module, name: str) -> dict[str, list[Param]]:
    """{method: parameters} of class ``name``, with inherited in-file methods and the
    dataclass constructor as ``__init__``."""
    classes = _classes(tree)
    chain = _chain(name, classes)
    methods: dict[str, list[Param]] = {}
    for cls in reversed(chain):
        for node in cls.body:
            if isinstance(node, ast.FunctionDef) and \
                    (not node.name.startswith("_") or node.name == "__init__"):
                static = any(ast.unparse(d) == "staticmethod" for d in node.decorator_list)
                methods[node.name] = _params(node, drop_first=not static)
    if "__init__" not in methods and any(_is_dataclass(c) for c in chain):
        methods["__init__"] = _fields(chain)
    return methods


def _function(tree: ast.Module, name: str) -> ast.FunctionDef:
    return next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name)



def _twin_method_params(cls: type, name: str) -> list[Param]:
    attr = inspect.getattr_static(cls, name)
    if isinstance(attr, (classmethod, staticmethod)):
        return _twin_params(getattr(cls, name))
    return _twin_params(getattr(cls, name))[1:]  # drop self


# --- the checks -----------------------------------------------------------------------

FLASH = {"flash_attn_func": porter_runtime.attention,
         "flash_attn_qkvpacked_func": porter_runtime.attention_qkvpacked,
         "flash_attn_kvpacked_func": porter_runtime.attention_kvpacked,
         "flash_attn_varlen_func": porter_runtime.attention_varlen,
         "flash_attn_varlen_qkvpacked_func": porter_runtime.attention_varlen_qkvpacked,
         "flash_attn_varlen_kvpacked_func": porter_runtime.attention_varlen_kvpacked}


@pytest.mark.parametrize("name", sorted(FLASH))
def test_flash_attn_twins_have_the_real_signatures(name):
    tree = _source("flash-attn", "flash_attn/flash_attn_interface.py")
    real = _params(_function(tree, name), drop_first=False)
    assert incompatibilities(real, _twin_params(FLASH[name])) == []


@pytest.mark.parametrize("kind", ["forward", "varlen_forward", "backward", "varlen_backward"])
def test_private_flash_attn_twins_bind_the_real_layout(kind):
    """The private functions' twins (attn/internals.py) bind 2.7's layout, which 2.8.3
    keeps: the same names in the same order, and the same defaults where it has them.
    (2.5's and 2.6's layouts were read off those releases' sources when written.)"""
    from porter_runtime.attn import internals

    tree = _source("flash-attn", "flash_attn/flash_attn_interface.py")
    real = _params(_function(tree, f"_flash_attn_{kind}"), drop_first=False)
    assert [name for name, _, _ in real] == internals._params(kind, "2.7")
    for name, _, default in real:
        if default is not _NONE:
            assert _same_default(default, internals._DEFAULTS[name]), name


def test_every_flash_attn_export_is_twinned_or_reported():
    tree = _source("flash-attn", "flash_attn/__init__.py")
    exported = {a.name for n in tree.body if isinstance(n, ast.ImportFrom) for a in n.names}
    # flash_attn_with_kvcache (an in-place paged KV-cache kernel) has no twin: porter's
    # rule reports it (PT-flash) with SDPA plus an explicit cache as the alternative.
    assert exported - set(FLASH) == {"flash_attn_with_kvcache"}


def test_memory_efficient_attention_has_the_real_signature():
    tree = _source("xformers", "xformers/ops/fmha/__init__.py")
    real = _params(_function(tree, "memory_efficient_attention"), drop_first=False)
    assert incompatibilities(real, _twin_params(porter_runtime.memory_efficient_attention)) == []


@pytest.mark.parametrize("name", sorted(xformers_bias.__all__))
def test_xformers_bias_stand_ins_have_every_public_method(name):
    tree = _source("xformers", "xformers/ops/fmha/attn_bias.py")
    assert name in _classes(tree), f"xformers 0.0.35 has no {name}"
    stand_in = getattr(xformers_bias, name)
    problems = {}
    for method, real in public_api(tree, name).items():
        if not hasattr(stand_in, method):
            problems[method] = ["missing"]
            continue
        found = incompatibilities(real, _twin_method_params(stand_in, method))
        if found:
            problems[method] = found
    assert problems == {}


def test_local_attention_methods_return_mirrored_classes():
    """Every bias a mirrored method returns is itself mirrored (checked above)."""
    tree = _source("xformers", "xformers/ops/fmha/attn_bias.py")
    for name in ("BlockDiagonalMask", "LowerTriangularFromBottomRightMask"):
        for node in _chain(name, _classes(tree))[0].body:
            if isinstance(node, ast.FunctionDef) and node.name.startswith("make_"):
                returned = ast.unparse(node.returns).strip("'\"")
                assert returned in xformers_bias.__all__, (name, node.name, returned)


def _bnb_tree(family: str) -> ast.Module:
    return _source("bitsandbytes", f"bitsandbytes/optim/{family.lower()}.py")


@pytest.mark.parametrize("name", _thirdparty_bnb.NAMES)
def test_bnb_twins_map_arguments_in_the_real_order_with_torch_defaults(name):
    family = _thirdparty_bnb.family(name)
    real = public_api(_bnb_tree(family), name)["__init__"]
    torch_cls, shared = _thirdparty_bnb._FAMILIES[family]
    real_pos = [p[0] for p in real if p[1] == "pos"][1:]  # after params
    assert real_pos[:len(shared)] == list(shared), "positional order differs"
    torch_defaults = {p.name: p.default for p in inspect.signature(torch_cls).parameters.values()}
    for pname, _, default in real:
        if pname in shared and default is not _NONE:
            # an omitted argument gets torch's default: it must be bitsandbytes' too
            assert _same_default(default, torch_defaults[pname]), (pname, default)


def test_every_bnb_optimizer_of_a_twinned_family_is_twinned():
    tree = _source("bitsandbytes", "bitsandbytes/optim/__init__.py")
    exported = {a.name for n in tree.body if isinstance(n, ast.ImportFrom) for a in n.names}
    twinned_families = {n for n in exported if _thirdparty_bnb.family(n)}
    assert twinned_families == set(_thirdparty_bnb.NAMES)
    # The others (Lion, LAMB, LARS, AdEMAMix, ...) have no torch.optim counterpart with
    # the same update; porter reports them instead of rewriting.


def test_adam_atan2_twin_has_the_real_signature():
    tree = _source("adam-atan2", "adam_atan2/adam_atan2.py")
    problems = {}
    for method, real in public_api(tree, "AdamATan2").items():
        found = incompatibilities(real, _twin_method_params(porter_runtime.AdamATan2, method))
        if found:
            problems[method] = found
    assert problems == {}


def test_incompatibilities_detects_differences():
    """The checker itself: each kind of difference is found."""
    def real(a, b=1, *, c=None): ...
    fn = ast.parse("def real(a, b=1, *, c=None): pass").body[0]
    params = _params(fn, drop_first=False)
    assert incompatibilities(params, _twin_params(real)) == []
    def swapped(b=1, a=0, *, c=None): ...
    def no_c(a, b=1): ...
    def other_default(a, b=2, *, c=None): ...
    def extra_required(a, b=1, *, c=None, d): ...
    assert incompatibilities(params, _twin_params(swapped))
    assert incompatibilities(params, _twin_params(no_c)) == ["lacks 'c'"]
    assert incompatibilities(params, _twin_params(other_default)) == \
        ["'b' defaults to 2, not 1"]
    assert incompatibilities(params, _twin_params(extra_required))


def test_apex_fused_adam_step_takes_apex_deprecated_arguments():
    """apex (not on PyPI): FusedAdam.step(closure, grads, output_params, scale,
    grad_norms, grad_scaler), the deprecated ones rejected with apex's message."""
    p = torch.nn.Parameter(torch.ones(2))
    opt = porter_runtime.FusedAdam([p])
    p.grad = torch.ones(2)
    opt.step(None, grad_scaler=None)
    with pytest.raises(RuntimeError, match="FusedAdam has been updated"):
        opt.step(grads=[torch.ones(2)])


@pytest.mark.parametrize("name,path", [("unbind", "xformers/ops/unbind.py"),
                                       ("scaled_index_add", "xformers/ops/indexing.py"),
                                       ("index_select_cat", "xformers/ops/indexing.py")])
def test_xformers_helpers_have_the_real_signatures(name, path):
    from porter_runtime import xformers_ops

    real = _params(_function(_source("xformers", path), name), drop_first=False)
    assert incompatibilities(real, _twin_params(getattr(xformers_ops, name))) == []
