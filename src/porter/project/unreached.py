"""Modules of the tree that never run on a Mac as the tree is written: those nothing of the
tree runs (no script, test, notebook or config reaches them, and no other module imports
them), and another accelerator's backend (the last section).

HazyResearch/based carries two copies of flash-attn's ``ops`` package (``based/ops/`` and
``train/ops/``): fused dense layers, Triton kernels, apex-style norms. Its model and
training code import one of those files; the rest is a copy nobody imports. Porter's
findings there (a CUDA-only import, a Triton kernel) never run on a Mac, and the blind
labels called 140 of them false (docs/first-contact.md, round 6). A finding in such a
module is therefore listed for information (porter.engine.stages.notes), never as
needs-a-human; its rewrites are made as anywhere else.

A module is *reached* when any of these holds, and everything a reached module imports is
reached in turn (the closure over the tree's imports):

- it runs by itself: a package's ``__init__``, a ``__main__``, ``setup.py``, a
  ``conftest.py`` or a test file; a file that reads its command line (``__main__``,
  ``sys.argv``, ``argparse``, ``fire``, ``hydra``, ``click``, ``typer``); a file with a
  call or a loop at its top (``main()``, ``for ...:``), which is how a script without a
  ``__main__`` guard runs;
- a notebook imports it;
- a text of the tree names it: its dotted name or a dotted tail of two parts or more
  (``train.callbacks.params``, ``ops.fused_dense``) in a config (Hydra's ``_target_``), a
  shell script (``python -m``), a README, or a string of Python code (StyleGAN's
  ``class_name='training.networks.Generator'``); its path (``tools/export.py``,
  ``tools/export``) or its file name (``export.py``) anywhere;
- a dynamic import of a dotted prefix that it falls under (``import_module(f"models.{x}")``).

A copy of another project kept under a folder named for third-party code
(``third_party/``, ``3rdparty/``, ``external/``, ``vendor/``, ``deps/``: H2O's
``benchmark/third_party/DeepSpeed/`` and ``.../transformers/``, forks it installs for its
baselines) is reached only from outside it: its modules when the tree imports them (and
what they import in turn), its scripts, tests and examples when a text or a reached module
outside the copy names them. Its own tests, benchmarks and example scripts run by
themselves for that project's developers, not for this repository's users; its README
naming its own examples says nothing of this repository (blind round 17 labelled the 120
findings in such files of H2O's two copies false).

What is not known is reached: every import is matched by name against every module whose
dotted name ends that way (``import utils`` reaches each ``utils.py``), an import anywhere
in a file counts (in a function, under a guard, in a docstring's example), and a tree that
is not read whole (a single file, a path inside the tree) or has nothing that runs by itself
(a library of modules and package ``__init__`` files only) reaches everything.


Another accelerator's backend (``other_vendor_modules``)
--------------------------------------------------------
Code for an Ascend NPU, an Intel XPU, a TPU, written beside the CUDA path and chosen only
on that device, runs, but never on a Mac.

Liger-Kernel keeps a Triton port of every kernel for Ascend NPUs in
``src/liger_kernel/ops/backends/_ascend/ops/``; its registry loads that package only when
the device is ``"npu"``. A Mac never runs it, nor does a CUDA machine, and porter's 94
findings there (each kernel "needs a CUDA GPU") were all labelled false (blind round 10).
What porter finds in such a module is listed for information (porter.engine.stages.notes);
its rewrites are made as anywhere else.

A module is another vendor's when both hold:

- a folder on its path is named for the vendor (a word of the folder's name, split at
  ``_``, ``-`` and ``.``: ``_ascend``, ``npu_ops``, ``xpu``, ``backends/tpu``), and
- the vendor's own words are in the module or in that folder's ``__init__.py``
  (``torch_npu``, ``"npu"``, ``Ascend``): a folder called ``tpu`` that is about
  something else says nothing of XLA.

The module's file name alone never makes it one (``npu_utils.py`` beside ``train.py`` is
imported on every device), and a folder named for CUDA's own platforms (``cuda``, ``rocm``:
ROCm builds of torch answer to "cuda") is not another vendor's.
"""

from __future__ import annotations

import json
import re
from typing import Callable, Iterable, Mapping, Sequence

#: A file that reads its command line, or is run by a tool, whatever it contains (plain byte
#: searches: a word inside another one only makes one more file a root).
_RUNS = (b"__main__", b"sys.argv", b"argparse", b"parse_args(", b"Fire(", b"hydra.main", b"@click.", b"typer",
         b"absl.app", b"app.run(")
#: A statement at the file's top (column 0) that calls: ``main()``, ``train(cfg)``; a
#: definition, import, assignment or guard is not one (``_KEYWORDS`` are taken out after).
_TOP_CALL = re.compile(rb"\n([A-Za-z_][\w.]*)[ \t]*\(")
#: ... or loops.
_TOP_LOOPS = (b"\nfor ", b"\nwhile ", b"\nwith ", b"\nasync for ", b"\nasync with ")
_KEYWORDS = frozenset(b"def class import from async if elif else try except finally return raise assert global "
                      b"nonlocal del pass lambda not and or in is None True False await yield".split())
#: Calls that import a module named by a value: the literal prefix of their argument, if any.
_DYNAMIC = re.compile(rb"(?:import_module|__import__|get_obj_by_name|locate|get_class|get_method)\([ \t]*[fr]?[\"']"
                      rb"([\w.]+)")
_DYNAMIC_CALL = re.compile(rb"\b(?:import_module|__import__|get_obj_by_name|locate|get_class|get_method)\(")
#: A string that is a dotted name (``"torchtitan.models"``, ``f"models.{x}"``'s start).
_DOTTED_STRING = re.compile(rb"[\"']([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*(?=\.\{)|[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+(?=[\"']))")
_TEST_FILE = re.compile(r"(?:^|/)(?:test_[^/]*|[^/]*_test|conftest|setup|__main__|__init__|noxfile|manage)\.py$|"
                        r"(?:^|/)tests?/")

#: Reads what a module imports: (its file, the files each import of it may mean).
Imports = Callable[[str, bytes], Iterable[str]]


def unreached_modules(sources: Mapping[str, bytes], modules: Mapping[str, str], imports: Imports,
                      texts: Mapping[str, bytes], notebooks: Mapping[str, bytes]) -> frozenset[str]:
    """Files of ``sources`` (the tree's Python files, with their dotted ``modules``) that
    nothing of the tree reaches. ``imports(rel, code)``: the files the imports of ``code``
    (read as if it were at ``rel``) may mean. ``texts``: the tree's other text files;
    ``notebooks``: its notebooks (their code is read for imports)."""
    roots = {rel for rel, data in sources.items() if _runs(rel, data)}
    if not notebooks and all(rel.endswith("__init__.py") for rel in roots):
        return frozenset()  # nothing of the tree runs by itself: what it is for is not known
    roots = {rel for rel in roots if not vendored_copy(rel)}
    for rel, data in notebooks.items():
        roots.update(imports(rel[: -len(".ipynb")] + ".py", notebook_code(data)))
    roots.update(_dynamically(modules, sources))
    reached = _close(roots, sources, imports, set())
    left = [rel for rel in sources if rel not in reached]
    if left:  # the texts are searched only for what the imports did not reach
        named = _named(left, modules, {**texts, **notebooks}, sources, reached)
        reached = _close(named, sources, imports, reached)
    return frozenset(rel for rel in sources if rel not in reached)


#: A folder that holds copies of other projects.
_THIRD_PARTY = re.compile(r"(?i)(?:third[_-]?party|3rd[_-]?party|external|externals|extern|vendor|vendored|deps)")


def vendored_copy(rel: str) -> str:
    """The folder of the copy of another project that ``rel`` is in (``a/third_party/DeepSpeed/``),
    or "": a file in a folder under one named for third-party code (module docstring)."""
    parts = rel.split("/")
    for at, part in enumerate(parts[:-2]):
        if _THIRD_PARTY.fullmatch(part):
            return "/".join(parts[: at + 2]) + "/"
    return ""


def _close(roots: Iterable[str], sources: Mapping[str, bytes], imports: Imports, reached: set[str]) -> set[str]:
    todo = list(roots)
    while todo:
        rel = todo.pop()
        if rel in reached or rel not in sources:
            continue
        reached.add(rel)
        todo.extend(imports(rel, sources[rel]))
    return reached


def _runs(rel: str, data: bytes) -> bool:
    if _TEST_FILE.search(rel) or any(word in data for word in _RUNS):
        return True
    text = b"\n" + data
    return any(loop in text for loop in _TOP_LOOPS) or \
        any(m.group(1) not in _KEYWORDS for m in _TOP_CALL.finditer(text))


#: The longest run of name characters around a match: a dotted name, or a path.
_DOTTED_CHARS = frozenset(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.")
_PATH_CHARS = _DOTTED_CHARS | frozenset(b"/-\\")


def _token(data: bytes, at: int, end: int, chars: frozenset) -> bytes:
    while at > 0 and data[at - 1] in chars:
        at -= 1
    while end < len(data) and data[end] in chars:
        end += 1
    return data[at:end]


def _named(candidates: Sequence[str], modules: Mapping[str, str], texts: Mapping[str, bytes],
           sources: Mapping[str, bytes], reached: set[str]) -> set[str]:
    """The ``candidates`` a text names. A dotted name (``ops.fused_dense``, or
    ``ops.fused_dense.FusedDense``) counts where a whole dotted word starts with it, in a
    text other than Python or on a line of Python that is not an import (the import graph
    reads those, and ``from flash_attn.ops.fused_dense import`` names another package's
    module); a path (``tools/export.py``, ``tools/export``, ``export.py``) anywhere but in a comment
    of Python (``# Adapted from .../xformers/triton/k_activations.py``). A module of a
    vendored copy counts as named only by a text outside the copy or a ``reached`` module."""
    found: set[str] = set()
    everything = [*texts.items(), *sources.items()]
    for rel in candidates:
        dotted = modules.get(rel, "")
        parts = dotted.split(".")
        if not dotted:
            continue
        tails = tuple(".".join(parts[i:]) for i in range(len(parts) - 1))
        short = parts[-1].encode("utf-8", "surrogateescape")  # a file name that is not UTF-8 (café.py in Latin-1)
        copy = vendored_copy(rel)
        for where, data in everything:
            if where == rel or (copy and where.startswith(copy) and where not in reached):
                continue
            at = data.find(short)
            while at >= 0:
                end = at + len(short)
                word = _token(data, at, end, _DOTTED_CHARS).decode("ascii", "replace")
                if any(word == t or word.startswith(t + ".") for t in tails) \
                        and not (where.endswith(".py") and _on_import_line(data, at)):
                    break
                path = _token(data, at, end, _PATH_CHARS).decode("ascii", "replace").replace("\\", "/")
                if _path_of(path, rel) and not (where.endswith(".py") and _in_comment(data, at)):
                    break
                at = data.find(short, end)
            if at >= 0:
                found.add(rel)
                break
    return found


def _path_of(path: str, rel: str) -> bool:
    """Whether ``path`` (``tools/export.py``, ``./export``, ``export.py``,
    ``../_base_/default_runtime.py``) is the end of ``rel``'s path, from a folder boundary:
    ``apex/fused_dense/fused_dense.py`` in a URL is not ``ops/fused_dense.py``."""
    parts = path.split("/")
    parts = [p for p in parts[max((i + 1 for i, p in enumerate(parts) if p == ".."), default=0):]
             if p not in ("", ".")]  # mmdetection's `_base_ = ["../_base_/default_runtime.py"]`: what follows the `..`
    if not parts or (len(parts) == 1 and not parts[0].endswith(".py")):  # a bare word is not a path
        return False
    if not parts[-1].endswith(".py"):
        parts[-1] += ".py"
    mine = rel.split("/")
    return len(parts) <= len(mine) and mine[len(mine) - len(parts):] == parts


def _in_comment(data: bytes, at: int) -> bool:
    start = data.rfind(b"\n", 0, at) + 1
    return b"#" in data[start:at]


def _on_import_line(data: bytes, at: int) -> bool:
    """An import statement names modules the import graph resolves (and may name another
    package's module of the same tail: ``from flash_attn.ops.fused_dense import ...``)."""
    start = data.rfind(b"\n", 0, at) + 1
    line = data[start:at].lstrip()
    return line.startswith((b"from ", b"import "))


def _dynamically(modules: Mapping[str, str], sources: Mapping[str, bytes]) -> set[str]:
    """The modules under a dotted prefix that a file importing by value names in a string:
    the literal start of the call's argument (``import_module(f"models.{name}")``), or any
    dotted string of that file (torchtitan's ``for prefix in ("torchtitan.models", ...)``
    then ``import_module(f"{prefix}.{name}.config_registry")``)."""
    prefixes: set[str] = set()
    for data in sources.values():
        if b"(" not in data or not _DYNAMIC_CALL.search(data):
            continue
        prefixes.update(m.group(1).decode().strip(".") for m in _DYNAMIC.finditer(data))
        prefixes.update(m.group(1).decode() for m in _DOTTED_STRING.finditer(data))
    prefixes.discard("")
    return {rel for rel, dotted in modules.items()
            if any(dotted == p or dotted.startswith(p + ".") or f".{p}." in f".{_inside_copy(rel, dotted)}."
                   for p in prefixes)}


def _inside_copy(rel: str, dotted: str) -> str:
    """``dotted`` below the folder of the vendored copy ``rel`` is in: the copy's folder is
    named for its project (``third_party/transformers/``), and transformers' own
    ``import_module(..., "transformers.models")`` means its package (``src/transformers/``),
    not every module of the copy (its examples)."""
    copy = vendored_copy(rel)
    return dotted[len(copy.replace("/", ".")):] if copy else dotted


def notebook_code(data: bytes) -> bytes:
    """A notebook's code cells, one after another; the file itself where it is not a
    notebook porter can read (the notebook stage reports that file's error)."""
    try:
        cells = json.loads(data).get("cells", [])
    except (ValueError, AttributeError, RecursionError):
        return data
    if not isinstance(cells, list):
        return data
    code: Sequence = [c.get("source", "") for c in cells if isinstance(c, dict) and c.get("cell_type") == "code"]
    return "\n".join("".join(p for p in s if isinstance(p, str)) if isinstance(s, list) else str(s)
                     for s in code).encode("utf-8", "replace")

#: vendor -> (the words of a folder's name that name it, the words in code that confirm it)
_VENDORS: dict[str, tuple[frozenset[str], re.Pattern[bytes]]] = {
    "an Ascend NPU": (frozenset({"npu", "ascend"}), re.compile(rb"(?i)\b(?:npu|ascend|torch_npu)\b")),
    "an Intel XPU": (frozenset({"xpu"}), re.compile(rb"(?i)\b(?:xpu|intel_extension_for_pytorch)\b")),
    "a TPU (XLA)": (frozenset({"tpu", "xla"}), re.compile(rb"(?i)\b(?:torch_xla|xla|tpu)\b")),
    "a Moore Threads GPU (MUSA)": (frozenset({"musa"}), re.compile(rb"(?i)\b(?:musa|torch_musa)\b")),
    "a Cambricon MLU": (frozenset({"mlu", "cambricon"}), re.compile(rb"(?i)\b(?:mlu|torch_mlu)\b")),
    "a Gaudi HPU": (frozenset({"hpu", "habana", "gaudi"}), re.compile(rb"(?i)\b(?:hpu|habana_frameworks)\b")),
    "a Graphcore IPU": (frozenset({"ipu", "poptorch"}), re.compile(rb"(?i)\b(?:ipu|poptorch)\b")),
}
_WORDS = re.compile(r"[A-Za-z0-9]+")


def other_vendor_modules(sources: Mapping[str, bytes]) -> dict[str, str]:
    """File -> "a backend for VENDOR (under FOLDER/)" for each file of ``sources`` (the
    tree's Python files) that is another accelerator's backend (module docstring)."""
    found: dict[str, str] = {}
    for rel, data in sources.items():
        parts = rel.split("/")[:-1]
        for depth in range(len(parts) - 1, -1, -1):
            words = {w.lower() for w in _WORDS.findall(parts[depth])}
            vendor = next((v for v, (names, _) in _VENDORS.items() if words & names), None)
            if vendor is None:
                continue
            folder = "/".join(parts[: depth + 1])
            init = sources.get(f"{folder}/__init__.py", b"")
            if _VENDORS[vendor][1].search(data) or _VENDORS[vendor][1].search(init):
                found[rel] = f"a backend for {vendor} (under `{folder}/`)"
            break
    return found
