"""The guard of ``porter verify``'s child processes, installed as their ``sitecustomize``.

It runs in the *target's* interpreter (which may not have porter installed), so it uses
the standard library only and never imports porter, torch or the target's code (but for
``--emulate cuda``, whose emulation it starts: torch is then imported first).

What it does, when ``PORTER_VERIFY_GUARD`` (JSON) is set:

* CUDA-only packages installed here (flash_attn, xformers, apex, triton, ...: porter's
  one table, ``porter/rulebase/cuda_packages.py``, handed over in the JSON) become
  "not installed": every import finder's answer for them is dropped unless the module
  lives inside the verified tree, so ``importlib.util.find_spec`` returns None and
  ``import flash_attn`` raises the plain ``ModuleNotFoundError`` a Mac would raise. A
  machine with those packages can't hide a CUDA-only import from the check.
* ``porter_runtime`` is found only inside the tree: the ported code must use the runtime
  that ``porter migrate --write`` vendored, not the copy installed with porter.

The environment (set by porter verify, not here) hides the GPUs themselves:
``CUDA_VISIBLE_DEVICES=""`` (and the ROCm twins), so ``torch.cuda.is_available()`` is
False even on a CUDA machine.
"""

import json
import os
import re
import sys

CONFIG_VARIABLE = "PORTER_VERIFY_GUARD"
#: Set by ``porter verify --emulate cuda``: the emulation starts here, before the code runs.
EMULATE_CUDA_VARIABLE = "PORTER_EMULATE_CUDA"
#: Set by ``porter verify --against``: every interpreter's global generators start from it.
SEED_VARIABLE = "PORTER_VERIFY_SEED"

RUNTIME = "porter_runtime"

#: Names this process hid (the child runner reads it to explain a ModuleNotFoundError).
HIDDEN: set = set()


def _real(path):
    try:
        return os.path.realpath(path)
    except (OSError, ValueError):
        return None


def _inside(path, roots):
    real = _real(path) if isinstance(path, str) else None
    if not real:
        return False
    for root in roots:
        if real == root or real.startswith(root.rstrip(os.sep) + os.sep):
            return True
    return False


class _Filter:
    """A meta path finder that answers like ``finder`` but never with a hidden module."""

    def __init__(self, finder, roots, allowed, hidden, pattern):
        self._finder = finder
        self._roots = roots
        self._allowed = allowed
        self._hidden = hidden
        self._pattern = pattern

    def find_spec(self, name, path=None, target=None):
        spec = self._finder.find_spec(name, path, target)
        if spec is not None and self._hides(name, spec):
            HIDDEN.add(name.partition(".")[0])
            return None
        return spec

    def _hides(self, name, spec):
        top = name.partition(".")[0]
        if top in self._allowed:
            return False
        if top != RUNTIME and top not in self._hidden and not (self._pattern and self._pattern.match(top)):
            return False
        places = [spec.origin] if spec.origin else []
        places += list(spec.submodule_search_locations or [])
        return not any(_inside(p, self._roots) for p in places)

    def __getattr__(self, attr):  # invalidate_caches, find_distributions, ...
        return getattr(self._finder, attr)

    def __repr__(self):
        return f"<porter verify filter over {self._finder!r}>"


def install(config):
    roots = [r for r in (_real(p) for p in config.get("roots", [])) if r]
    allowed = frozenset(config.get("allow", []))
    hidden = frozenset(config.get("hidden", []))
    try:
        pattern = re.compile(config["hidden_pattern"]) if config.get("hidden_pattern") else None
    except re.error:
        pattern = None
    if any(isinstance(f, _Filter) for f in sys.meta_path):
        return
    sys.meta_path[:] = [
        f if not hasattr(f, "find_spec") or getattr(f, "__name__", "") in ("BuiltinImporter", "FrozenImporter")
        else _Filter(f, roots, allowed, hidden, pattern)
        for f in sys.meta_path
    ]


def _chain():
    """Run the sitecustomize this one shadows, if the interpreter has one."""
    here = os.path.dirname(os.path.abspath(__file__))
    me = sys.modules.pop("sitecustomize", None)
    # the guard's folder leaves sys.path: the target must not import from it
    sys.path[:] = [p for p in sys.path if _real(p or ".") != _real(here)]
    try:
        import sitecustomize  # noqa: F401
    except ImportError:
        if me is not None:
            sys.modules["sitecustomize"] = me
    except Exception:  # another site's hook failing is not porter's business
        pass


def _emulate_cuda():
    """``--emulate cuda``: this interpreter is a CUDA machine (porter/verify/emulate_cuda,
    copied beside this file). The one case where the guard imports torch."""
    try:
        import _porter_cuda_emulation
    except ImportError as exc:
        sys.stderr.write(f"porter verify: --emulate cuda could not start: {exc}\n")
        return
    _porter_cuda_emulation.install()


def _seed(value):
    """``--against``: both trees' interpreters draw the same numbers (Python's, NumPy's and
    torch's global generators seeded, torch's seeding CUDA's too)."""
    import random

    random.seed(value)
    try:
        import numpy
        numpy.random.seed(value)
    except ImportError:
        pass
    try:
        import torch
        torch.manual_seed(value)
    except ImportError:
        pass


def _main():
    sys.modules.setdefault("_porter_verify_guard", sys.modules[__name__])
    raw = os.environ.get(CONFIG_VARIABLE)
    if raw:
        try:
            install(json.loads(raw))
        except ValueError:
            pass
    if os.environ.get(EMULATE_CUDA_VARIABLE):
        _emulate_cuda()
    if os.environ.get(SEED_VARIABLE, "").isdigit():
        _seed(int(os.environ[SEED_VARIABLE]))
    if __name__ == "sitecustomize":
        _chain()


_main()
