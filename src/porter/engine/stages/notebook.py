"""Jupyter notebooks: the code cells are migrated one by one, everything else is kept.

Only the ``source`` of code cells changes. Markdown and raw cells, outputs, execution
counts and metadata stay as they are, byte for byte: the new ``source`` of each changed
cell is spliced into the notebook's own text, in the layout of the value it replaces
(a list of lines or one string, its indent, escaped or raw non-ASCII), so whatever wrote
the JSON (nbformat, Colab, an old Jupyter with ``\u001B`` escapes), the rest of the file
is left as it was.

IPython syntax is not Python: a cell magic (``%%time`` on the first line) leaves the
whole cell alone, and line magics, shell escapes (``%pip``, ``!nvidia-smi``,
``files = !ls``) and help lines (``torch.cuda?``) are masked while the cell is migrated
and put back unchanged.

The runtime import goes once into the notebook: into the first code cell that imports
torch or, if none comes before it, the first cell that changed, where that cell's import
style puts it. A notebook runs with its own folder first on ``sys.path``: one at the root
finds the root's copy; one elsewhere imports the copy of a package it imports, or finds
the root's copy once the runtime is installed (porter.project.vendoring.runtime_home; the run says so).
No ``sys.path`` code is added.
"""

from __future__ import annotations

import ast
import copy
import dataclasses
import difflib
import json
import re
import warnings
from collections import Counter
from pathlib import Path
from typing import Any, Optional

import libcst as cst

from porter.edits.runtime_import import add_runtime_import, place_import
from porter.engine.options import Options
from porter.engine.stages.python_stage import binds_runtime_name, migrate_source, not_rewritten
from porter.engine.results import FileResult
from porter.files.sources import describe_syntax_error
from porter.project.vendoring.runtime_home import runtime_home_fields
from porter.rulebase.rule import Finding

#: Line magics and shell escapes (``%pip``, ``!ls``, ``files = !ls``) and help lines
#: (``torch.cuda?``, ``??x``): a ``?`` ends a help line only after a bare name, never
#: after a comment (``x = 1  # why?``) or a string.
_MAGIC = re.compile(r"^\s*(?:[%!]|[\w.,\[\] ]+=\s*[%!]|\?{1,2}[\w.]+\s*$|[\w.\[\]()]+\?{1,2}\s*$)")
_TORCH_IMPORT = re.compile(r"^\s*(?:import\s+torch\b|from\s+torch\b)", re.M)
_RUNTIME_IMPORT = re.compile(r"^\s*(?:import\s+porter_runtime\b|from\s+([\w.]+)\s+import\s*(?:\([^)]*|[^#\n]*)\bporter_runtime\b)", re.M)
#: An import that binds the name ``porter_runtime`` itself (not ``import porter_runtime as pr``).
_RUNTIME_BOUND = re.compile(r"^\s*(?:import\s+porter_runtime\b(?!\s+as\b)|from\s+[\w.]+\s+import\s*(?:\([^)]*|[^#\n]*)"
                            r"\bporter_runtime\b(?!\s+as\b))", re.M)
_MARK = "pass  # porter: the cell starts below"
#: A name as another cell may read it (code, a magic's arguments, an f-string): any word.
_WORD = re.compile(r"[A-Za-z_]\w*")


class NotebookError(Exception):
    pass


# -- JSON, byte for byte ---------------------------------------------------------

_JSON_TYPES = {type(None): "null", bool: "boolean", int: "number", float: "number", str: "string", list: "array"}


def load(data: bytes) -> tuple[dict[str, Any], str]:
    """The notebook and its text."""
    try:
        text = data.decode("utf-8")
        notebook = json.loads(text)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise NotebookError(f"not a valid notebook (JSON): {exc}") from None
    except RecursionError:
        raise NotebookError("not a valid notebook (JSON): nested too deep to read") from None
    if not isinstance(notebook, dict) or not isinstance(notebook.get("cells"), list):
        raise NotebookError("not a notebook: no list of cells")
    for number, cell in enumerate(notebook["cells"], 1):  # nbformat's shape, as far as porter reads it
        if not isinstance(cell, dict):
            raise NotebookError(f"not a notebook: cell {number} is a JSON {_JSON_TYPES.get(type(cell), 'value')}, "
                                "not an object")
        source = cell.get("source", "")
        if not (isinstance(source, str) or isinstance(source, list) and all(isinstance(x, str) for x in source)):
            raise NotebookError(f"not a notebook: cell {number}'s source is neither a string nor a list of strings")
    return notebook, text


def dump(notebook: dict[str, Any], text: str, before: list[Any]) -> bytes:
    """``text`` with the ``source`` of each cell that differs from ``before`` (the cells'
    sources as loaded) replaced in place; every other byte stays."""
    spans = _source_spans(text)
    out, last = [], 0
    for index, cell in enumerate(notebook["cells"]):
        if not isinstance(cell, dict) or cell.get("source") == before[index]:
            continue
        if spans[index] is None:  # a code cell with no source is never changed
            raise NotebookError(f"cell {index + 1}: no source to replace; left untouched")
        start, end = spans[index]
        out += [text[last:start], _value_like(cell["source"], text, start, end)]
        last = end
    new = "".join(out) + text[last:]
    if _sources(json.loads(new)) != _sources(notebook):  # the splice is checked, never trusted
        raise NotebookError("internal error: the spliced notebook does not read back; left untouched")
    return new.encode("utf-8")


def _sources(notebook: dict[str, Any]) -> list[Any]:
    return [c.get("source") if isinstance(c, dict) else None for c in notebook["cells"]]


_SPACE = re.compile(r"[ \t\n\r]*")
_BLANKS = re.compile(r"[ \t]*")
_DECODER = json.JSONDecoder()


def _skip(text: str, at: int) -> int:
    return _SPACE.match(text, at).end()  # type: ignore[union-attr]


def _items(text: str, at: int, close: str):
    """Where each member of the object or array opening at ``at`` lies: (key or None,
    value start, value end)."""
    at = _skip(text, at + 1)
    if text[at] == close:
        return
    while True:
        key = None
        if close == "}":
            key, at = json.decoder.scanstring(text, at + 1)
            at = _skip(text, _skip(text, at) + 1)  # past the colon
        _, end = _DECODER.raw_decode(text, at)
        yield key, at, end
        at = _skip(text, end)
        if text[at] != ",":
            return
        at = _skip(text, at + 1)


def _source_spans(text: str) -> list[Optional[tuple[int, int]]]:
    """The (start, end) of each cell's ``source`` value in the notebook's text."""
    top = _skip(text, 0)
    cells = next(start for key, start, _ in _items(text, top, "}") if key == "cells")
    spans: list[Optional[tuple[int, int]]] = []
    for _, start, _end in _items(text, cells, "]"):
        members = _items(text, start, "}") if text[start] == "{" else ()
        spans.append(next(((s, e) for key, s, e in members if key == "source"), None))
    return spans


def _value_like(value: Any, text: str, start: int, end: int) -> str:
    """``value`` as JSON laid out like ``text[start:end]``, the value it replaces: items
    one per line at its indent (or on one line), non-ASCII raw or escaped as the file
    has it."""
    old = text[start:end]
    escape = text.isascii()
    if "\n" not in old:
        separators = (",", ":") if '","' in old else (", ", ": ")
        return json.dumps(value, ensure_ascii=escape, separators=separators)
    line = text.rfind("\n", 0, start) + 1
    base = _BLANKS.match(text, line).group()  # type: ignore[union-attr]
    lead = _BLANKS.match(old, old.index("\n") + 1).group()  # type: ignore[union-attr]
    unit = lead[len(base):] if lead.startswith(base) and len(lead) > len(base) else " "
    laid = json.dumps(value, ensure_ascii=escape, indent=unit)
    return laid.replace("\n", "\n" + base)


def cell_text(cell: dict[str, Any]) -> str:
    source = cell.get("source", "")
    return "".join(source) if isinstance(source, list) else source


def _set_text(cell: dict[str, Any], text: str) -> None:
    """Store ``text`` in the cell's own shape: a list of lines or one string."""
    if isinstance(cell.get("source"), list):
        cell["source"] = text.splitlines(keepends=True)
    else:
        cell["source"] = text


def code_cells(notebook: dict[str, Any]) -> list[tuple[int, dict[str, Any]]]:
    """(1-based cell number, cell) of each code cell porter may change."""
    return [(n, c) for n, c in enumerate(notebook["cells"], 1)
            if c.get("cell_type") == "code" and not cell_text(c).lstrip().startswith("%%")]


# -- IPython syntax ----------------------------------------------------------------

def mask(text: str) -> tuple[str, dict[str, str]]:
    """``text`` with magic and shell lines replaced by unique placeholders; none in a
    cell that is Python as it is (a continuation line may start with ``%`` or ``!=``)."""
    if _parses(text):
        return text, {}
    lines = text.splitlines(keepends=True)
    saved: dict[str, str] = {}
    indent = None  # the magic line's, while its backslash continues it (``!python x.py \``, as IPython reads it)
    for i, line in enumerate(lines):
        body = line.rstrip("\r\n")
        if indent is None and _MAGIC.search(body):
            indent = line[: len(line) - len(line.lstrip())]
        if indent is not None:
            key = f"{indent}pass  # porter-masked-line-{i}"
            saved[key] = body
            lines[i] = key + line[len(body):]
            indent = indent if body.endswith("\\") else None
    return "".join(lines), saved


def _parses(text: str) -> bool:
    try:
        ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False
    return True


def unmask(text: str, saved: dict[str, str]) -> str:
    if not saved:
        return text
    lines = text.splitlines(keepends=True)
    for i, line in enumerate(lines):
        body = line.rstrip("\r\n")
        if body in saved:
            lines[i] = saved[body] + line[len(body):]
    return "".join(lines)


# -- migration ---------------------------------------------------------------------

def migrate_notebook(data: bytes, options: Options, *, path: str, bootstrap=None) -> tuple[bytes, list[Finding]]:
    """The notebook's new bytes and the findings (messages start with the cell number)."""
    notebook, json_text = load(data)
    before = copy.deepcopy(_sources(notebook))
    cells = code_cells(notebook)
    findings: list[Finding] = []
    changed: list[int] = []
    needs_runtime = False
    # Cells share one namespace: each is migrated below the imports of the cells before
    # it (so ``torch`` in cell 5 resolves through cell 1's ``import torch``), and below
    # ``import porter_runtime``, so the engine doesn't import the runtime in every cell.
    context = ["import porter_runtime"]
    words = [set(_WORD.findall(cell_text(cell))) for _, cell in cells]
    in_cells = Counter(word for found in words for word in found)
    named = frozenset(in_cells)
    for index, (number, cell) in enumerate(cells):
        text = cell_text(cell)
        masked, saved = mask(text)
        prefix = "\n".join(context) + "\n" + _MARK + "\n"
        # an import this cell's rewrites leave unused stays if another cell names it
        others = named - {word for word in words[index] if in_cells[word] == 1}
        try:
            result = migrate_source((prefix + masked).encode("utf-8"), dataclasses.replace(options, read_outside=others),
                                    path=path)
        except cst.ParserSyntaxError as exc:  # like a .py file: left whole, never half-ported
            reason = describe_syntax_error(exc, masked.encode()).replace(" at line ", " at cell line ")
            raise NotebookError(f"cell {number}: {reason}") from None
        offset = prefix.count("\n")
        # a finding on the earlier cells' imports above this one was reported in its own cell
        findings += [_in_cell(f, number, offset) for f in result.findings if f.line > offset]
        ported = result.new.decode("utf-8").split(_MARK + "\n", 1)[1]
        if ported != masked:  # as for a .py file: Python 3 before, compiling after
            problem = _compile_problem(ported, masked)
            if problem:
                raise NotebookError(f"cell {number}: {problem}")
        new = unmask(ported, saved)
        context += _imports(masked)
        if new != text:
            _set_text(cell, new)
            changed.append(number)
            needs_runtime |= result.needs_runtime
    line = binds_runtime_name("\n".join(mask(cell_text(c))[0] for _, c in cells).encode()) if needs_runtime else 0
    if line:  # a cell's own porter_runtime would shadow the import: report, don't rewrite
        return data, not_rewritten(findings, line)
    clone = runs_in_a_fresh_clone(cells) if needs_runtime else None
    root = getattr(getattr(bootstrap, "layout", None), "root", None)
    if clone is not None and not _is_own_remote(clone[1], root):
        # the clone is someone else's copy, which the port will not reach: report, don't rewrite
        number, url = clone
        return data, not_rewritten(findings, 0, why=(
            f"not rewritten: the notebook clones {url} and runs from that clone (cell {number}), which is not "
            "this checkout's origin: its code stays the original's, without porter_runtime, so a ported notebook "
            "would fail there, on CUDA too; run it from the ported checkout (drop the clone), or clone the "
            "repository this port is pushed to, and port it again"))
    if needs_runtime and not any(_RUNTIME_BOUND.search(cell_text(c)) for _, c in cells):
        _import_runtime(cells, changed[0], bootstrap, [name for line in context[1:] for name in _top_names(line)])
    return (dump(notebook, json_text, before) if changed else data), findings


#: ``!git clone URL`` in a cell (any options before the URL).
_CLONE = re.compile(r"^\s*!\s*git\s+clone\s+(?:-\S+\s+)*(\S+)(?:[ \t]+([^\s&;|]+))?", re.MULTILINE)
#: A change of folder: ``%cd X``, ``!cd X`` (IPython keeps it only with %cd, but people write it), ``os.chdir(X)``.
_CHDIR = re.compile(r"""^\s*(?:[%!]\s*cd\s+|.*\bos\.chdir\(\s*[rRfF]?)["']?([^"'\s)]+)""", re.MULTILINE)


def runs_in_a_fresh_clone(cells: list[tuple[int, dict[str, Any]]]) -> Optional[tuple[int, str]]:
    """(cell number, URL) where the notebook clones a repository and then changes into it
    (a Colab notebook's ``!git clone https://github.com/org/SiT.git`` + ``os.chdir('SiT')``):
    the code it then imports is that clone's, not this checkout's; else None."""
    clones: list[tuple[int, str, str]] = []
    for number, cell in cells:
        text = cell_text(cell)
        for match in _CLONE.finditer(text):
            url = match.group(1).strip("'\"")
            folder = (match.group(2) or url).strip("'\"").rstrip("/").rsplit("/", 1)[-1].removesuffix(".git")
            clones.append((number, url, folder))
        for match in _CHDIR.finditer(text):
            target = match.group(1).rstrip("/").rsplit("/", 1)[-1]
            for found in clones:
                if found[2] and target == found[2]:
                    return found[0], found[1]
    return None


def _remote_key(url: str) -> str:
    """``github.com/org/name`` for the https, ssh and scp forms of a git URL."""
    url = url.strip().lower().removesuffix("/").removesuffix(".git")
    url = re.sub(r"^[a-z+]+://", "", url)
    url = re.sub(r"^[^@/]+@", "", url)
    return url.replace(":", "/", 1) if "/" not in url.split(":", 1)[0] else url


def _is_own_remote(url: str, root: Optional[Path]) -> bool:
    """Whether ``url`` is the origin of the checkout at ``root`` (its ``.git/config``): a
    notebook that clones the repository itself gets the port once the port is merged."""
    if root is None:
        return False
    try:
        config = (root / ".git" / "config").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return False
    remotes = re.findall(r"^\s*url\s*=\s*(\S+)", config, re.MULTILINE)
    return _remote_key(url) in {_remote_key(r) for r in remotes}


def _compile_problem(new: str, old: str) -> str:
    """Why a ported cell would not compile, as python_stage.compile_error says it of a
    file, with IPython's top-level ``await`` allowed."""
    def error(code: str) -> str:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                compile(code, "<cell>", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT, dont_inherit=True)
        except SyntaxError as exc:
            return f"{exc.msg} (cell line {exc.lineno})"
        except (ValueError, RecursionError, MemoryError) as exc:
            return str(exc) or type(exc).__name__
        return ""

    if not error(new):
        return ""
    original = error(old)
    if original:
        return f"does not compile: {original}; left untouched"
    return f"internal error: the ported cell would not compile ({error(new)}); left untouched"


def _imports(code: str) -> list[str]:
    """The top-level imports of a cell (none when Python can't parse it)."""
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError, RecursionError):
        return []
    return [ast.get_source_segment(code, node) or "" for node in tree.body
            if isinstance(node, (ast.Import, ast.ImportFrom)) and getattr(node, "module", "") != "__future__"]


def _in_cell(finding: Finding, number: int, offset: int) -> Finding:
    return dataclasses.replace(finding, line=finding.line - offset, message=f"cell {number}: {finding.message}")


def _top_names(line: str) -> list[str]:
    words = line.replace(",", " ").split()
    if words[:1] == ["from"] and len(words) > 1 and not words[1].startswith("."):
        return [words[1].split(".")[0]]
    if words[:1] == ["import"]:
        return [w.split(".")[0] for w in words[1:] if w != "as"]
    return []


def _import_runtime(cells: list[tuple[int, dict[str, Any]]], first_changed: int, bootstrap, imported: list[str]) -> None:
    """Add the runtime import to the first cell importing torch, else the first changed one."""
    target = next(c for n, c in cells if n == first_changed or _TORCH_IMPORT.search(cell_text(c)))
    masked, saved = mask(cell_text(target))
    module = cst.parse_module(masked)
    if bootstrap is None:
        module = add_runtime_import(module, None)
    else:
        home = bootstrap(imported)
        module = place_import(module, home.statement, home.package, bootstrap.first_party)
    _set_text(target, _after_shell_lines(unmask(module.code, saved), cell_text(target)))


#: Shell and magic lines that change what a later import finds: an install, a clone, a
#: change of folder (``!echo`` or ``%matplotlib`` change nothing of the kind).
_SETS_UP = re.compile(r"\s*(?:[!%]\s*(?:pip|conda|mamba|uv|git\s+clone|cd)\b|%(?:pip|conda|cd)\b)")


def _after_shell_lines(text: str, before: str) -> str:
    """``text`` with the runtime import it gained moved below the cell's set-up lines
    (installs, clones, ``%cd``) that come before the runtime's first use: a Colab cell that runs ``!pip
    install`` or ``!git clone`` and ``%cd repo`` before ``import torch`` must reach the
    repository (and its vendored runtime) before it imports it."""
    lines = text.splitlines(keepends=True)
    old = set(before.splitlines())
    added = [i for i, line in enumerate(lines) if "porter_runtime" in line and line.rstrip("\r\n") not in old
             and line.lstrip().startswith(("import ", "from "))]
    if len(added) != 1:
        return text
    at = added[0]
    first_use = next((i for i, line in enumerate(lines) if i != at and "porter_runtime." in line), len(lines))
    shell = [i for i, line in enumerate(lines[:first_use]) if i > at and _SETS_UP.match(line)]
    if not shell:
        return text
    line = lines.pop(at).rstrip("\r\n") + "\n"
    blank = [i for i in (at - 1, at) if 0 <= i < len(lines) and not lines[i].strip()]
    if blank and sum(not x.strip() for x in lines) > sum(not x.strip() for x in before.splitlines(True)):
        lines.pop(blank[0])  # the blank line the import brought with it
        shell = [i - 1 if i > blank[0] else i for i in shell]
    if shell[-1] == len(lines) and not lines[-1].endswith("\n"):  # the import becomes the last line
        lines[-1] += "\n"
        line = line.rstrip("\n")
    lines.insert(shell[-1], line)  # shell[-1] moved up by the pop: the import goes right after it
    return "".join(lines)


def _check_size(data: bytes) -> None:
    """NotebookError for a notebook whose code is larger than a .py porter parses (the
    outputs, images included, cost nothing)."""
    from porter.engine.stages.python_stage import MAX_PARSE_BYTES

    if len(data) <= MAX_PARSE_BYTES:
        return
    cells = load(data)[0]["cells"]
    code = sum(len(cell_text(c)) for c in cells if c.get("cell_type") == "code")
    if code > MAX_PARSE_BYTES:
        raise NotebookError(f"{code / 1e6:.1f} MB of code: larger than the {MAX_PARSE_BYTES / 1e6:.0f} MB "
                            "porter parses; port it by hand or split it")


def process_notebook(data: bytes, rel: str, options: Options, bootstrap=None) -> FileResult:
    """The notebook stage (porter.engine.process picks it for a ``.ipynb``): every failure is a
    per-file error."""
    try:
        _check_size(data)
        new, findings = migrate_notebook(data, options, path=rel, bootstrap=bootstrap)
    except NotebookError as exc:
        return FileResult(rel, "error", error=str(exc))
    except Exception as exc:  # a bug in porter: report it for this file, go on
        return FileResult(rel, "error", error=f"internal error: {type(exc).__name__}: {exc}")
    result = (FileResult(rel, "unchanged", findings=findings) if new == data
              else FileResult(rel, "changed", findings=findings, old=data, new=new))
    found = next(filter(None, (_RUNTIME_IMPORT.search(cell_text(c)) for c in load(new)[0]["cells"]
                               if c.get("cell_type") == "code")), None)
    result.uses_runtime = found is not None  # the run vendors the runtime for it
    # the copy an import it already has refers to (`from mingpt import porter_runtime`)
    result.runtime_from = (found.group(1) or "") if found else ""
    if result.status == "changed":
        result.runtime_folder, result.runtime_package, result.runtime_note = runtime_home_fields(bootstrap, rel)
    return result


# -- review ------------------------------------------------------------------------

def cell_diff(rel: str, old: bytes, new: bytes) -> str:
    """A unified diff per changed code cell, for people (not ``git apply``-able)."""
    before = json.loads(old.decode("utf-8"))["cells"]
    after = json.loads(new.decode("utf-8"))["cells"]
    out = []
    for number, (a, b) in enumerate(zip(before, after), 1):
        if cell_text(a) == cell_text(b):
            continue
        lines = difflib.unified_diff(_lines(cell_text(a)), _lines(cell_text(b)), lineterm="\n",
                                     fromfile=f"a/{rel} (cell {number})", tofile=f"b/{rel} (cell {number})")
        out.append("".join(lines))
    return "".join(out)


def _lines(text: str) -> list[str]:
    return [line if line.endswith("\n") else line + "\n" for line in text.splitlines(keepends=True)]
