"""``porter verify``'s worker: imports a batch of the tree's modules, one after another.

Runs in the target's interpreter as a script (standard library only; never imports
porter). The job comes as JSON on stdin; results go out as JSON lines on the process's
original stdout, while whatever the target prints is sent to stderr (fd 1 is pointed at
fd 2), so a ``print`` at import time can't corrupt the protocol.

Messages: ``{"event": "start", "key": KEY}`` before each import (KEY: the file's path in the tree), ``{"event":
"done", ...}`` after it (ok, or the exception: type, last line, frames, missing module),
``{"event": "end", ...}`` at the end. A module that runs past the time limit makes
``faulthandler`` dump where it is stuck to stderr and end the process; the parent then
starts a new worker for the rest of the batch.
"""

import faulthandler
import importlib
import importlib.util
import json
import os
import sys
import time
import traceback


def _send(channel, **message):
    channel.write(json.dumps(message) + "\n")
    channel.flush()


def _inside(path, root):
    try:
        real = os.path.realpath(path)
    except (OSError, ValueError, TypeError):
        return False
    return real == root or real.startswith(root + os.sep)


def _evict(root, own, names):
    """Forget tree modules that a new sys.path root resolves differently: a module of
    the same top-level name loaded from another folder of the tree."""
    for name in list(sys.modules):
        top = name.partition(".")[0]
        if top not in names:
            continue
        origin = getattr(sys.modules.get(name), "__file__", None)
        if not origin or not _inside(origin, root):
            continue
        place = os.path.join(own, top)
        real = os.path.realpath(origin)
        if real != place + ".py" and not real.startswith(place + os.sep):
            del sys.modules[name]


def _top_names(folder):
    try:
        entries = os.listdir(folder)
    except OSError:
        return set()
    return {e[:-3] if e.endswith(".py") else e for e in entries}


def _run_header(item):
    """A script (porter/verify/scripts.py): only its top-level imports run, under its
    name, not __main__; the rest of its top level is the program (--run's to check)."""
    import ast
    import types

    path = item["file"]
    with open(path, "rb") as handle:
        tree = ast.parse(handle.read(), path)
    keep = set(item["header"])
    tree.body = [s for s in tree.body if s.lineno in keep]
    module = types.ModuleType(item["name"])
    module.__file__ = path
    exec(compile(tree, path, "exec"), module.__dict__)


def _import(item):
    name, path = item["name"], item["file"]
    if item.get("header") is not None:
        _run_header(item)
        return
    if item["kind"] == "module":
        module = importlib.import_module(name)
    else:  # a top-level file: loaded by its location, under its file name
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        previous = sys.modules.get(name)
        sys.modules[name] = module
        try:
            spec.loader.exec_module(module)
        except BaseException:
            if previous is not None:
                sys.modules[name] = previous
            else:
                sys.modules.pop(name, None)
            raise
        if previous is not None and getattr(previous, "__file__", None) != path:
            sys.modules[name] = previous  # keep the stdlib/installed module of that name
    origin = getattr(module, "__file__", None)
    if origin and os.path.realpath(origin) != os.path.realpath(path):
        raise ImportError(f"{name} was imported from {origin}, not from this file (a module of the same "
                          f"name comes first on sys.path)")


def _chain(exc):
    seen = []
    while exc is not None and exc not in seen:
        seen.append(exc)
        exc = exc.__cause__ or (None if exc.__suppress_context__ else exc.__context__)
    return seen


def _describe(exc, hidden):
    chain = _chain(exc)
    frames = [[f.filename, f.lineno, f.name] for f in traceback.extract_tb(exc.__traceback__)]
    if isinstance(exc, SyntaxError) and exc.filename and exc.lineno:
        frames.append([exc.filename, exc.lineno, "<syntax>"])
    earlier = []
    for cause in chain[1:]:
        earlier.append([[f.filename, f.lineno, f.name] for f in traceback.extract_tb(cause.__traceback__)])
    missing = [e.name for e in chain if isinstance(e, ModuleNotFoundError) and e.name]
    last = traceback.format_exception_only(type(exc), exc)[-1].strip()
    hid = sorted({m.partition(".")[0] for m in missing} & hidden)
    return {
        "ok": False,
        "type": type(exc).__name__,
        "error": last,
        "frames": frames,
        "cause_frames": earlier,
        "missing": missing,
        "hidden": hid,
        "traceback": "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))[-6000:],
    }


def _warm_up(job, base):
    """Import what nearly every module imports first (the vendored runtime, which
    imports torch the way the ported code does; else torch), so that the time limit
    measures each module and not torch's start-up."""
    sys.path[:] = list(dict.fromkeys([job["root"]] + base))
    for name in job.get("warm_up", []):
        try:
            importlib.import_module(name)
        except BaseException:  # the modules that need it will fail and say why
            pass


def main():
    sys.path.pop(0)  # this script's folder
    job = json.load(sys.stdin)
    channel = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)  # the target's prints go to stderr
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)  # input() at import time ends instead of waiting
    sys.stdin = open(0, closefd=False)
    guard = sys.modules.get("_porter_verify_guard")  # porter/verify/guard.py
    hidden = guard.HIDDEN if guard is not None else set()
    root = os.path.realpath(job["root"])
    base = [p for p in sys.path if p not in ("", ".")]
    timeout = job["timeout"]
    _warm_up(job, base)
    _send(channel, event="ready")
    current_root = None
    for item in job["modules"]:
        own = os.path.realpath(item["paths"][0])
        if own != current_root:
            _evict(root, own, _top_names(own))
            current_root = own
        sys.path[:] = list(dict.fromkeys(item["paths"] + base))
        sys.argv = [item["file"]]
        os.chdir(job["cwd"])
        _send(channel, event="start", key=item["key"])
        faulthandler.dump_traceback_later(timeout, exit=True, file=sys.stderr)
        began = time.perf_counter()
        try:
            _import(item)
            result = {"ok": True}
        except BaseException as exc:  # SystemExit and KeyboardInterrupt from the target too
            result = _describe(exc, set(hidden))
        finally:
            faulthandler.cancel_dump_traceback_later()
        result["seconds"] = round(time.perf_counter() - began, 3)
        _send(channel, event="done", key=item["key"], **result)
    torch = sys.modules.get("torch")
    cuda = None
    if torch is not None:
        try:
            cuda = bool(torch.cuda.is_available())
        except Exception:
            cuda = None
    _send(channel, event="end", cuda_available=cuda)
    sys.stderr.flush()
    os._exit(0)  # no atexit hooks or non-daemon threads of the target


if __name__ == "__main__":
    main()
