"""What a module that imports Triton binds where Triton is not installed (no CUDA).

Triton has no macOS wheel and torch's CPU builds bring none, so ``import triton`` fails
on a Mac before any of the module's PyTorch code can run: the ``*_ref`` function beside
the kernel, the ``if x.is_cuda:`` branch, the model class that imports the module for
one optional kernel. Porter wraps such an import (TP605)::

    try:
        import triton
        import triton.language as tl
    except ImportError:
        if torch.cuda.is_available():
            raise
        triton = porter_runtime.triton_stand_in("triton")
        tl = porter_runtime.triton_stand_in("triton.language")

On CUDA nothing changes: the import succeeds, or fails as before. Elsewhere the names
are stand-ins that let the module's kernel *definitions* run at import time
(``@triton.jit``, ``@triton.autotune(configs=[triton.Config(...)], key=[...])``,
``@triton.heuristics({...})``, ``BLOCK: tl.constexpr`` annotations, ``triton.cdiv`` in
a grid), while *launching* a kernel (``kernel[grid](...)``) raises an error that names
the kernel and where it is defined. Nothing is put in ``sys.modules``: other code that
asks whether Triton is installed (``importlib.util.find_spec``, ``torch.compile``) is
told the truth.
"""
from __future__ import annotations

from typing import Any, Callable, Optional

#: Triton's pure helpers, which grid computations call before any launch.
_HELPERS: dict[str, Callable[..., Any]] = {
    "cdiv": lambda x, y: (x + y - 1) // y,
    "next_power_of_2": lambda n: 1 if n <= 1 else 1 << (int(n) - 1).bit_length(),
}


class TritonMissing(RuntimeError):
    """A Triton kernel was launched (or Triton used) where Triton is not installed."""


def _missing(what: str) -> TritonMissing:
    return TritonMissing(
        f"{what} needs Triton, which is CUDA-only and not installed here. Run this path only for "
        "CUDA tensors (`if x.is_cuda:`), or call the module's PyTorch implementation instead "
        "(porter's TP601 finding names the kernel and its launch lines).")


class Config:
    """``triton.Config``: the launch settings an ``@triton.autotune`` list holds, kept
    readable (module-level code reads ``cfg.kwargs`` / ``cfg.num_warps``)."""

    def __init__(self, kwargs: Optional[dict] = None, num_warps: int = 4, num_stages: int = 3,
                 num_ctas: int = 1, maxnreg: Optional[int] = None, pre_hook: Any = None, **extra: Any) -> None:
        self.kwargs = dict(kwargs or {})
        self.num_warps, self.num_stages, self.num_ctas = num_warps, num_stages, num_ctas
        self.maxnreg, self.pre_hook = maxnreg, pre_hook
        self.__dict__.update(extra)

    def all_kwargs(self) -> dict:
        return {**self.kwargs, "num_warps": self.num_warps, "num_stages": self.num_stages,
                "num_ctas": self.num_ctas}

    def __repr__(self) -> str:
        return f"Config({self.kwargs!r}, num_warps={self.num_warps}, num_stages={self.num_stages})"


class Kernel:
    """A ``@triton.jit`` (``autotune``, ``heuristics``) function: defined, never launched."""

    def __init__(self, fn: Callable[..., Any], configs: Optional[list] = None) -> None:
        while isinstance(fn, Kernel):
            configs = configs if configs is not None else fn.configs
            fn = fn.fn
        self.fn = fn
        self.configs = list(configs or [])
        self.__name__ = getattr(fn, "__name__", "kernel")
        self.__qualname__ = getattr(fn, "__qualname__", self.__name__)
        self.__doc__ = getattr(fn, "__doc__", None)
        self.__module__ = getattr(fn, "__module__", __name__)
        self.__wrapped__ = fn
        try:  # what Triton's JITFunction exposes, read by autotuner subclasses at import
            import inspect

            self.arg_names = list(inspect.signature(fn).parameters)
        except (TypeError, ValueError):
            self.arg_names = []

    def _where(self) -> str:
        code = getattr(self.fn, "__code__", None)
        place = f" ({code.co_filename}:{code.co_firstlineno})" if code is not None else ""
        return f"Triton kernel `{self.__name__}`{place}"

    def __getitem__(self, grid: Any) -> Callable[..., Any]:
        def launch(*args: Any, **kwargs: Any) -> Any:
            raise _missing(f"launching {self._where()}")
        return launch

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise _missing(f"calling {self._where()}")

    def run(self, *args: Any, **kwargs: Any) -> Any:
        raise _missing(f"running {self._where()}")

    warmup = run

    def __repr__(self) -> str:
        return f"<{self._where()}, not launchable: Triton is not installed>"


class TritonClass(Kernel):
    """What a class the module derives from a Triton class (``class CachedAutotuner(
    triton.runtime.Autotuner)``) derives from instead: built around a kernel function
    (``Autotuner(fn, fn.arg_names, configs, key, ...)``), it is that :class:`Kernel`,
    defined and never launched; built otherwise, it keeps what it was given."""

    def __init__(self, fn: Any = None, *args: Any, **kwargs: Any) -> None:
        if callable(fn) and (hasattr(fn, "__code__") or isinstance(fn, Kernel)):
            configs = kwargs.get("configs", args[1] if len(args) > 1 and isinstance(args[1], list) else None)
            Kernel.__init__(self, fn, configs)
        else:
            self.fn, self.configs, self.args, self.kwargs = fn, [], args, kwargs
            self.__name__ = type(self).__name__


#: Calls that ask Triton about the machine (``triton.runtime.driver.active.get_current_target()``):
#: they raise at once, as they do where Triton finds no GPU, so the module's own
#: ``except`` picks its CPU answer.
_QUERIES = ("triton.runtime.driver",)


class StandIn:
    """``triton`` or one of its modules (``triton.language``), or something read from
    one. Attributes are stand-ins too; applied to a function it makes a :class:`Kernel`;
    called otherwise (``triton.autotune(configs=..., key=...)``, ``triton.jit(debug=True)``)
    it gives a decorator. Used as a number, a truth value or an iterable it raises."""

    def __init__(self, path: str, configs: Optional[list] = None) -> None:
        object.__setattr__(self, "_path", path)
        object.__setattr__(self, "_configs", configs)
        object.__setattr__(self, "_children", {})

    def __getattr__(self, name: str) -> Any:
        children = object.__getattribute__(self, "_children")
        if name in children:
            return children[name]
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)  # copy, pickle and inspect ask for dunders; say no
        if name not in children:
            path = f"{self._path}.{name}"
            if name in _HELPERS and self._path == "triton":
                children[name] = _HELPERS[name]
            elif name == "Config" and self._path == "triton":
                children[name] = Config
            else:
                children[name] = StandIn(path)
        return children[name]

    def __setattr__(self, name: str, value: Any) -> None:
        object.__getattribute__(self, "_children")[name] = value  # a monkeypatch of the module: keep it

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if len(args) == 1 and not kwargs and (callable(args[0]) and hasattr(args[0], "__code__")
                                              or isinstance(args[0], Kernel)):
            return Kernel(args[0], self._configs)  # @triton.jit / @triton.autotune(...)(fn)
        if self._path.startswith(_QUERIES):
            raise _missing(f"`{self._path}(...)`")
        configs = kwargs.get("configs", args[0] if args and isinstance(args[0], list) else None)
        return StandIn(f"{self._path}(...)", configs=configs)

    def __mro_entries__(self, bases: tuple) -> tuple:
        # `class CachedAutotuner(triton.runtime.Autotuner):` still defines a class, whose
        # instances built around a kernel are that kernel
        return (TritonClass,)

    def __repr__(self) -> str:
        return f"<stand-in for {self._path}: Triton is not installed>"

    def _refuse(self, *args: Any, **kwargs: Any) -> Any:
        raise _missing(f"`{self._path}`")

    __bool__ = __int__ = __float__ = __index__ = __iter__ = __len__ = _refuse
    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = _refuse
    __truediv__ = __rtruediv__ = __floordiv__ = __rfloordiv__ = __lt__ = __le__ = __gt__ = __ge__ = _refuse
    __getitem__ = _refuse


#: One ``triton`` per process, as a real package is: ``triton.language is tl``.
_ROOT = StandIn("triton")
#: Read at import time to pick code paths (``version.parse(triton.__version__) >= ...``).
_ROOT.__version__ = "0.0.0"


def triton_stand_in(module: str = "triton") -> Any:
    """The stand-in for ``module`` (``"triton"``, ``"triton.language"``, ...): what
    ``import triton`` / ``import triton.language as tl`` bind where Triton is missing."""
    if module != "triton" and not module.startswith("triton."):
        raise ValueError(f"not a Triton module: {module!r}")
    found: Any = _ROOT
    for part in module.split(".")[1:]:
        found = getattr(found, part)
    return found


__all__ = ["Config", "Kernel", "StandIn", "TritonClass", "TritonMissing", "triton_stand_in"]
