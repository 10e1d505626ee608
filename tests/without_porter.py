"""Run a script or module the way ``python FILE`` / ``python -m MOD`` would, on a machine
where porter is not installed: porter's own packages (``porter``, ``porter_runtime``) are
hidden, so the ported code must find the runtime that porter vendored into the repo.

Usage: python without_porter.py FILE [ARGS...] | python without_porter.py -m MODULE [ARGS...]
"""

import os
import runpy
import sys


def hide_porter() -> None:
    for finder in list(sys.meta_path):
        module = finder.__module__ if isinstance(finder, type) else type(finder).__module__
        if module.startswith("__editable__") and "porter" in module:
            sys.meta_path.remove(finder)
    keep = [os.path.abspath(p) for p in os.environ.get("PORTER_TEST_KEEP", "").split(os.pathsep) if p]
    sys.path[:] = [p for p in sys.path if not os.path.exists(os.path.join(p, "porter_runtime", "__init__.py"))
                   or os.path.abspath(p) in (os.getcwd(), *keep)]


def main() -> None:
    hide_porter()
    args = sys.argv[1:]
    if args[0] == "-m":
        sys.argv = [args[1], *args[2:]]
        sys.path[0] = os.getcwd()
        runpy.run_module(args[1], run_name="__main__", alter_sys=True)
    else:
        sys.argv = args
        sys.path[0] = os.path.dirname(os.path.abspath(args[0]))
        runpy.run_path(args[0], run_name="__main__")


if __name__ == "__main__":
    main()
