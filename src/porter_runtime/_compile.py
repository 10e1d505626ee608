"""torch.compile where it is the original's choice (CUDA) or the user opts in.

Off CUDA the default is eager: Inductor's Metal backend is a prototype before
torch 2.8 and still fails on some graphs, and Inductor on CPU needs a C++
compiler (facts §5). PORTER_COMPILE=1 opts in there; DISABLE_COMPILE=1 keeps
eager there. On CUDA only torch's own variables (TORCH_COMPILE_DISABLE,
TORCHDYNAMO_DISABLE, which torch.compile reads itself) change what happens:
porter's variables are ignored there, with one warning.

Eager still keeps what torch.compile returns for a module: an OptimizedModule
whose ``_orig_mod`` is the model, so ``model._orig_mod`` works and state-dict
keys carry the ``_orig_mod.`` prefix as on CUDA (a checkpoint saved on either
machine loads on the other). It is made by ``torch.compiler.disable(model)``,
not by ``torch.compile(model, backend="eager")``: the eager backend still runs
Dynamo, which traces every new input shape (a second or so each, recompiling up
to its cache limit) and can itself fail on code it cannot trace, and Dynamo is
part of what is being avoided off CUDA. The disabled wrapper calls the model
directly, with Dynamo off inside it.
"""
from __future__ import annotations

import functools
import os
import shutil
from typing import Any, Callable, Optional

import torch

from . import _compat, _device, _log

# Errors that mean "compilation could not be set up", matched by class name so
# that torch._inductor is never imported just to name them.
_SETUP_ERRORS = {"InvalidCxxCompiler", "CppCompileError", "BackendCompilerFailed",
                 "InductorError"}


def _has_cxx() -> bool:
    candidates = [os.environ.get("CXX", ""), "g++", "clang++", "c++"]
    return any(c and shutil.which(c) for c in candidates)


def setup_problem(kind: str, backend: Any = None) -> Optional[str]:
    """Why torch.compile cannot be set up on ``kind`` with ``backend``, or None."""
    if callable(backend):
        return None
    name = backend or "inductor"
    if name != "inductor":
        from torch._dynamo import list_backends  # heavy: only when compiling off CUDA
        known = list_backends(exclude_tags=())
        return None if name in known else f"torch.compile backend {name!r} is not available"
    if kind == "mps" and not _compat.at_least(2, 8):
        return f"torch {torch.__version__} has no usable Inductor backend for mps (needs 2.8)"
    if kind == "cpu" and not _has_cxx():
        return "Inductor on CPU needs a C++ compiler and none was found (set CXX)"
    return None


def _is_setup_error(exc: BaseException) -> bool:
    return any(cls.__name__ in _SETUP_ERRORS for cls in type(exc).__mro__)


def _guarded(eager: Callable[..., Any], compiled: Callable[..., Any]) -> Callable[..., Any]:
    """Call ``compiled``; if compiling fails to set up, warn once and stay eager."""
    state = {"fn": compiled}

    @functools.wraps(eager)
    def call(*args: Any, **kwargs: Any) -> Any:
        try:
            return state["fn"](*args, **kwargs)
        except Exception as exc:
            if state["fn"] is eager or not _is_setup_error(exc):
                raise
            _log.warn_once("compile:failed", f"torch.compile failed to set up "
                           f"({type(exc).__name__}: {str(exc)[:200]}); running eagerly")
            state["fn"] = eager
            return eager(*args, **kwargs)

    return call


def uncompiled(model: Callable[..., Any]) -> Any:
    """``model`` run eagerly, in the shape torch.compile returns it.

    A module: an OptimizedModule around it (``_orig_mod``, ``_orig_mod.``-prefixed
    state-dict keys), calling it with Dynamo off. A function: the function itself,
    since what torch.compile returns for one is a plain wrapper with its name and
    signature, and wrapping it in a disabled one would also stop an enclosing
    compiled function from tracing into it.
    """
    if not isinstance(model, torch.nn.Module):
        return model
    wrapped = torch.compiler.disable(model)
    if not hasattr(wrapped, "_orig_mod"):  # a torch whose disable() does not wrap modules
        _log.warn_once("compile:bare", f"torch {torch.__version__} cannot wrap a module "
                       "without compiling it: the model is returned unwrapped, so "
                       "`_orig_mod` and the `_orig_mod.` state-dict prefix are missing")
        return model
    return wrapped


def _compile_off_cuda(model: Callable[..., Any], kind: str, kwargs: dict[str, Any]) -> Any:
    if not _log.env_flag("PORTER_COMPILE"):
        _log.warn_once("compile:off", f"torch.compile is not used on {kind}: running eagerly "
                       "(set PORTER_COMPILE=1 to compile here)")
        return uncompiled(model)
    problem = setup_problem(kind, kwargs.get("backend"))
    if problem is not None:
        _log.warn_once("compile:setup", f"{problem}; running eagerly")
        return uncompiled(model)
    compiled = torch.compile(model, **kwargs)
    # Modules get the setup checks above only: an OptimizedModule cannot be
    # swapped for its eager module behind the caller's back.
    return compiled if isinstance(model, torch.nn.Module) else _guarded(model, compiled)


def compile(model: Optional[Callable[..., Any]] = None, **kwargs: Any) -> Any:
    """Twin of torch.compile, with its call forms: ``compile(m)``, ``compile(m, mode=...)``,
    ``@compile`` and ``@compile(mode=...)``.

    CUDA: ``torch.compile(model, **kwargs)``. MPS / CPU: eager with one warning,
    unless PORTER_COMPILE=1; then torch.compile after checking it can be set up
    (backend present, C++ compiler on CPU, torch >= 2.8 on MPS), falling back to
    eager with a warning otherwise. DISABLE_COMPILE=1: eager off CUDA. Eager is
    ``uncompiled(model)``: a module comes back wrapped as torch.compile wraps it
    (``_orig_mod``, same state-dict keys), a function unchanged.
    On CUDA, PORTER_COMPILE and DISABLE_COMPILE are ignored (one warning): torch
    reads its own TORCH_COMPILE_DISABLE / TORCHDYNAMO_DISABLE.
    """
    if model is None:
        return lambda fn: compile(fn, **kwargs)
    kind = _device.device_type()
    if kind == "cuda":
        _warn_ignored_on_cuda()
        return torch.compile(model, **kwargs)
    if _log.env_flag("DISABLE_COMPILE"):
        _log.info_once("compile:disabled", "DISABLE_COMPILE is set: torch.compile skipped")
        return uncompiled(model)
    return _compile_off_cuda(model, kind, kwargs)


def _warn_ignored_on_cuda() -> None:
    """On CUDA the original code's torch.compile runs as written: porter's variables
    must not change it; say so when one is set."""
    for name in ("DISABLE_COMPILE", "PORTER_COMPILE"):
        if os.environ.get(name, "").strip():
            _log.warn_once(f"compile:cuda:{name}", f"{name} is set but ignored on CUDA: "
                           "torch.compile runs as in the original code (torch's own "
                           "TORCH_COMPILE_DISABLE=1 turns it off)")
