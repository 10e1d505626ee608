"""Tree shaking the vendored runtime (porter.files.runtime_shake): each module of a copy
keeps the top-level statements the port reaches, the copy imports and runs, and shaking
again with what a copy holds gives the same bytes (how porter grows a copy and tells its
own from one edited by hand)."""

from __future__ import annotations

import ast
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from porter.files.apply import runtime_files, runtime_source, vendor_changes
from porter.files.runtime_shake import held, shake
from porter.project.vendoring.runtime_modules import parts_for, tool_parts

SOURCE = runtime_source()
EXPORTS = sorted(ast.literal_eval(next(
    n.value for n in ast.parse((SOURCE / "__init__.py").read_text()).body
    if isinstance(n, ast.Assign) and any(getattr(t, "id", "") == "_EXPORTS" for t in n.targets))))

# A small runtime written the way porter_runtime is: a lazy __init__, modules that import
# their siblings, import-time work, a try/except pair, a protocol name.
FAKE = {
    "__init__.py": '''\
        """A fake runtime.

        More about it, which a sized copy leaves out.
        """
        import importlib as _importlib

        __version__ = "0.1.0"

        _EXPORTS = {"used": "_a", "unused": "_a", "far": "_b"}
        _MODULES = set()


        def __getattr__(name):
            if name not in _EXPORTS:
                raise AttributeError(name)
            module = _importlib.import_module(f".{_EXPORTS[name]}", __name__)
            return module if name in _MODULES else getattr(module, name)
        ''',
    "_a.py": '''\
        """Module a.

        Its long story.
        """
        import os
        import re

        from . import _b
        from ._c import SHARED

        TABLE = {"x": 1}
        READY = _b.setup()  # runs at import: kept in every copy of _a

        try:
            import json
        except ImportError:
            json = None


        def used():
            return _b.helper() + len(TABLE) + SHARED + len(json.dumps(1))


        def unused():
            return re.compile(os.sep)


        def _reset():
            pass
        ''',
    "_b.py": '''\
        """Module b."""


        def setup():
            return 1


        def helper():
            return 2


        def far():
            return 3
        ''',
    "_c.py": 'SHARED = 1\nOTHER = 2\n',
}


@pytest.fixture
def fake(tmp_path: Path) -> Path:
    source = tmp_path / "fake_rt"
    source.mkdir()
    for name, text in FAKE.items():
        (source / name).write_text(textwrap.dedent(text))
    return source


def _defined(data: bytes) -> set[str]:
    tree = ast.parse(data)
    return {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))} | {
        t.id for n in tree.body if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)}


def test_a_name_keeps_what_it_reaches_and_what_runs_at_import(fake, tmp_path):
    out = shake(fake, {"__init__", "_a.used"})
    assert set(out) == {"__init__", "_a", "_b", "_c"}
    a = out["_a"].decode()
    assert {"used", "TABLE", "READY", "_reset", "json"} <= _defined(out["_a"]) | {"json"} and "import json" in a
    assert "def unused" not in a and "import re" not in a and "import os" not in a
    assert a.startswith('"""Module a."""\n') and "long story" not in a  # the docstring's first paragraph
    assert _defined(out["_b"]) == {"setup", "helper"}  # far: nothing reaches it
    assert _defined(out["_c"]) == {"SHARED"}
    assert '_EXPORTS = {\n    "used": "_a",\n}' in out["__init__"].decode()
    package = tmp_path / "shaken"
    package.mkdir()
    for stem, data in out.items():
        (package / f"{stem}.py").write_bytes(data)
    proc = subprocess.run([sys.executable, "-c", "import shaken; print(shaken.used())"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and proc.stdout.strip() == "5", proc.stderr


def test_a_module_object_used_as_a_value_is_kept_whole(fake):
    (fake / "_d.py").write_text("from . import _b\n\n\ndef table():\n    return vars(_b)\n")
    assert _defined(shake(fake, {"_d.table"})["_b"]) == {"setup", "helper", "far"}


def test_every_name_of_a_whole_module_reads_as_the_module_shipped(fake):
    out = shake(fake, {"_a.*", "_b.*", "_c.*", "__init__.*"})
    assert out["_b"] == (fake / "_b.py").read_bytes() and out["_c"] == (fake / "_c.py").read_bytes()
    assert b"Its long story" not in out["_a"]  # a sized copy: the first paragraph only
    assert runtime_files() and all(runtime_files()[p.relative_to(SOURCE).as_posix()] == p.read_bytes()
                                   for p in SOURCE.rglob("*.py"))


@pytest.mark.parametrize("names", [[name] for name in EXPORTS] + [EXPORTS[::3], EXPORTS[1::4]])
def test_shaking_what_a_copy_holds_gives_the_copy_again(names, tmp_path):
    parts = parts_for(names, SOURCE)
    out = shake(SOURCE, parts)
    for stem, data in out.items():
        (tmp_path / f"{stem}.py").parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / f"{stem}.py").write_bytes(data)
    assert shake(SOURCE, held(tmp_path, SOURCE)) == out


def test_every_shaken_name_is_defined_where_the_copy_looks_for_it(tmp_path):
    """Static proof over every public name: in each sized copy, no name is undefined
    (ruff F821), every ``from .m import x`` and every ``_m.x`` finds ``x`` in the copy's
    ``m``, and the tools' references (porter fit, porter verify --emulate) are there."""
    for i, name in enumerate(EXPORTS):
        copy = tmp_path / f"rt_{i}"
        copy.mkdir()
        out = shake(SOURCE, parts_for([name], SOURCE))
        for stem, data in out.items():
            (copy / f"{stem}.py").parent.mkdir(parents=True, exist_ok=True)
            (copy / f"{stem}.py").write_bytes(data)
        names = {stem: _top_names(data) for stem, data in out.items()}
        every = {p.relative_to(SOURCE).with_suffix("").as_posix() for p in SOURCE.rglob("*.py")}
        for stem, data in out.items():
            assert all(f"{package}/__init__" in names for package in _packages(stem)), f"{name}: {stem} without its package"
            for module, attr in _sibling_uses(data, stem, every):
                assert module in names and (attr in names[module] or "__getattr__" in names[module]), \
                    f"{name}: {stem}.py uses {module}.{attr}, which the copy lacks"
        for part in tool_parts(SOURCE):
            module, _, attr = part.partition(".")
            assert module in names and (not attr or attr in names[module]), f"{name}: the tools need {part}"
    proc = subprocess.run([sys.executable, "-m", "ruff", "check", "--isolated", "--select", "F821,F822",
                           "--no-cache", "--output-format", "concise", str(tmp_path)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:]


def _top_names(data: bytes) -> set[str]:
    tree = ast.parse(data)
    found = set()
    for node in tree.body:
        for child in ast.walk(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and child in tree.body:
                found.add(child.name)
            elif isinstance(child, ast.Name) and isinstance(child.ctx, ast.Store):
                found.add(child.id)
            elif isinstance(child, (ast.Import, ast.ImportFrom)):
                found |= {(a.asname or a.name).split(".")[0] for a in child.names}
    return found


def _packages(stem: str) -> list[str]:
    folders = stem.split("/")[:-1]
    return ["/".join(folders[:i]) for i in range(1, len(folders) + 1)]


def _sibling_uses(data: bytes, stem: str, stems: set[str]) -> set[tuple[str, str]]:
    """(module, name) for each name a module takes from another module of the runtime:
    ``from .._device import x``, ``from . import libs as _libs`` then ``_libs.x``."""
    tree = ast.parse(data)
    aliases, uses = {}, set()
    folders = stem.split("/")[:-1]
    for node in ast.walk(tree):
        if not (isinstance(node, ast.ImportFrom) and node.level):
            continue
        base = "/".join(folders[:len(folders) - node.level + 1] + (node.module.split(".") if node.module else []))
        module = base if base in stems else f"{base}/__init__".lstrip("/")
        for alias in node.names:
            if f"{base}/{alias.name}".lstrip("/") in stems:
                aliases[alias.asname or alias.name] = f"{base}/{alias.name}".lstrip("/")
            else:
                uses.add((module, alias.name))
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases:
            uses.add((aliases[node.value.id], node.attr))
    return {(m, a) for m, a in uses if m in stems}


def _vendor(root: Path, parts) -> None:
    changes, _ = vendor_changes(root / "porter_runtime", root, parts=parts)
    for change in changes:
        path = root / change.path
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(change.new)


def test_a_copy_grows_and_never_shrinks(tmp_path):
    _vendor(tmp_path, parts_for(["device"], SOURCE))
    small = held(tmp_path / "porter_runtime", SOURCE)
    _vendor(tmp_path, parts_for(["autocast"], SOURCE))
    grown = held(tmp_path / "porter_runtime", SOURCE)
    assert small < grown and "_amp.autocast" in grown
    assert vendor_changes(tmp_path / "porter_runtime", tmp_path, parts=parts_for(["device"], SOURCE))[0] == []


def test_a_copy_edited_by_hand_is_left_alone_and_one_vendored_whole_is_not(tmp_path):
    _vendor(tmp_path, parts_for(["device"], SOURCE))
    device = tmp_path / "porter_runtime" / "_device.py"
    device.write_bytes(device.read_bytes().replace(b"def device(", b"def device(  "))
    changes, note = vendor_changes(tmp_path / "porter_runtime", tmp_path, parts=parts_for(["autocast"], SOURCE))
    assert changes == [] and "edited by hand" in note
    # a copy of the same version that an older porter vendored with whole modules: porter's own
    for path in (tmp_path / "porter_runtime").rglob("*.py"):
        path.write_bytes((SOURCE / path.relative_to(tmp_path / "porter_runtime")).read_bytes())
    changes, note = vendor_changes(tmp_path / "porter_runtime", tmp_path, parts=parts_for(["autocast"], SOURCE))
    assert "_amp.py" in {c.path.rsplit("/", 1)[-1] for c in changes} and "edited" not in note


def test_the_whole_runtime_replaces_a_sized_copy(tmp_path):
    _vendor(tmp_path, parts_for(["device"], SOURCE))
    _vendor(tmp_path, None)
    for path in SOURCE.rglob("*.py"):
        assert (tmp_path / "porter_runtime" / path.relative_to(SOURCE)).read_bytes() == path.read_bytes()


def test_a_copy_an_older_porter_vendored_with_whole_modules_only_gains(tmp_path):
    """Modules held whole (the sizing of an older porter, same runtime version) hold all
    a port needs of them: they stay as they are, and only what the copy lacks is added."""
    _vendor(tmp_path, parts_for(["device"], SOURCE))
    for path in (tmp_path / "porter_runtime").rglob("*.py"):
        path.write_bytes((SOURCE / path.relative_to(tmp_path / "porter_runtime")).read_bytes())
    changes, _ = vendor_changes(tmp_path / "porter_runtime", tmp_path, parts=parts_for(["device"], SOURCE))
    assert changes == []
    changes, _ = vendor_changes(tmp_path / "porter_runtime", tmp_path, parts=parts_for(["compile"], SOURCE))
    assert changes and all(c.old is None for c in changes)  # new modules only


def test_a_copy_in_an_older_porters_flat_layout_moves_into_sub_packages(tmp_path):
    """Before the runtime had sub-packages, a copy was one flat folder (``_twins.py``
    beside ``_device.py``). Such a copy is porter's own, not one edited by hand: a run
    vendors it again in today's layout, keeping what it held, and --write removes the flat
    modules it replaces, so that none is left behind, unused or half-updated."""
    from porter.files.apply import apply_changes

    _vendor(tmp_path, parts_for(["device_count"], SOURCE))
    copy = tmp_path / "porter_runtime"
    twins = (copy / "twins" / "device_calls.py").read_bytes()
    for path in sorted((copy / "twins").iterdir()):
        path.unlink()
    (copy / "twins").rmdir()
    (copy / "_twins.py").write_bytes(twins.replace(b"from .. import _device", b"from . import _device"))
    init = (copy / "__init__.py").read_text()
    (copy / "__init__.py").write_text(init.replace('"twins.device_calls"', '"_twins"')
                                      .replace('"attn.attention", "thirdparty.libs"', '"_attention", "_thirdparty_libs"'))
    changes, note = vendor_changes(copy, tmp_path, parts=parts_for(["compile"], SOURCE))
    written = {c.path for c in changes}
    assert {"porter_runtime/twins/device_calls.py", "porter_runtime/_compile.py", "porter_runtime/__init__.py"} <= written
    assert "edited" not in note and "flat layout" in note and "_twins.py" in note
    assert apply_changes(tmp_path, changes) == []
    assert not (copy / "_twins.py").exists()
    assert {"twins/device_calls.device_count", "_compile.compile"} <= held(copy, SOURCE)
    assert vendor_changes(copy, tmp_path, parts=parts_for(["compile"], SOURCE))[0] == []
    code = "import porter_runtime; print(porter_runtime.device_count(), porter_runtime.compile)"
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=300,
                          env={"CUDA_VISIBLE_DEVICES": "", "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0 and done.stdout.startswith("1 "), done.stderr[-2000:]
