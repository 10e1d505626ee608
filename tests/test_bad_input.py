"""Every kind of bad input: a clear per-file error, the file byte-identical, exit 2.

Each fixture holds CUDA code, so porter would parse it if it could (a file with nothing
to port is never parsed, by design). Each test also has one good file beside the bad
one, to show the rest of the tree is still migrated.
"""

import json
import os
import shutil
import stat
import sys
from pathlib import Path

import pytest

from porter_test_utils import run_porter, snapshot

CUDA = b"import torch\nx = torch.ones(1).cuda()\n"
MIGRATED = b"import torch\n\nimport porter_runtime\nx = torch.ones(1).to(porter_runtime.device())\n"


def make(root: Path, files: dict) -> Path:
    for rel, data in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return root


def migrate(root: Path, *args):
    """Run ``porter migrate ROOT --write`` and return (process, {path: error}, report)."""
    report = root.parent / f"{root.name}.json"
    proc = run_porter("migrate", root, "--write", "-j", "1", "--no-progress", "--report", report, *args)
    data = json.loads(report.read_text()) if report.exists() else {"files": [], "skipped": []}
    errors = {f["path"]: f["error"] for f in data["files"] if f["status"] == "error"}
    return proc, errors, data


def assert_bad_file(tmp_path, name: str, data: bytes, expected: str):
    """One bad file beside a good one: reported with ``expected``, left alone, exit 2."""
    root = make(tmp_path / "repo", {name: data, "good.py": CUDA})
    proc, errors, _ = migrate(root)
    assert proc.returncode == 2, proc.stderr
    assert list(errors) == [name]
    assert expected in errors[name], errors[name]
    assert f"{name}: error: {errors[name]}" in proc.stderr.decode()  # shown, not only in the report
    assert (root / name).read_bytes() == data
    assert (root / "good.py").read_bytes() == MIGRATED
    return errors[name]


# -- files porter can't read as Python 3 ----------------------------------------------

@pytest.mark.parametrize("name,data,expected", [
    ("syntax.py", b"import torch\nx = torch.ones(1).cuda(\n", "syntax error at line 2: '(' was never closed"),
    ("py2_print.py", b"import torch\nprint 'moving', torch.ones(1).cuda()\n",
     "this looks like Python 2 code (a print statement): porter ports Python 3 code only"),
    ("py2_except.py", b"import torch\ntry:\n    x = torch.ones(1).cuda()\nexcept IOError, e:\n    pass\n",
     "this looks like Python 2 code ('except X, e:')"),
    ("undecodable.py", b"import torch\nname = '\xe9t\xe9'\nx = torch.ones(1).cuda()\n",
     "cannot decode as utf-8: byte 0xe9 at line 2"),
    ("bad_coding.py", b"# -*- coding: klingon -*-\nimport torch\nx = torch.ones(1).cuda()\n",
     "bad encoding declaration: unknown encoding: klingon"),
    ("bom_latin.py", b"\xef\xbb\xbf# coding: latin-1\nimport torch\nx = torch.ones(1).cuda()\n",
     "bad encoding declaration"),
    ("binary.py", b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR torch cuda()\x00\xff", "binary file (contains NUL bytes)"),
    ("tabs_spaces.py", b"import torch\nif True:\n\tx = 1\n        y = torch.ones(1).cuda()\n",
     "inconsistent use of tabs and spaces in indentation"),
    ("long_chain.py", b"import torch\nx = torch.ones(1).cuda()" + b" + 1" * 5000 + b"\n",
     "too deeply nested for the parser; left untouched"),
    ("deep.py", b"import torch\nx = " + b"[" * 1000 + b"torch.ones(1).cuda()" + b"]" * 1000 + b"\n",
     "syntax error at line 2: too many nested parentheses"),
])
def test_unreadable_as_python_is_reported_and_untouched(tmp_path, name, data, expected):
    assert_bad_file(tmp_path, name, data, expected)


def test_nesting_python_rejects_is_a_syntax_error(tmp_path):
    """LibCST parses 200 nested parentheses, CPython does not: porter must not write
    code that Python rejects (the original doesn't compile either)."""
    data = b"import torch\nx = " + b"(" * 200 + b"torch.ones(1).cuda()" + b")" * 200 + b"\n"
    with pytest.raises(SyntaxError):
        compile(data, "deep.py", "exec")
    assert_bad_file(tmp_path, "deep.py", data, "too many nested parentheses")


# -- files porter must migrate without disturbing their form ----------------------------

def test_latin1_declaration_keeps_encoding(tmp_path):
    data = b"# -*- coding: latin-1 -*-\nimport torch\nname = 'caf\xe9'  # \xe0 la carte\nx = torch.ones(1).cuda()\n"
    root = make(tmp_path / "repo", {"latin.py": data})
    proc, errors, _ = migrate(root)
    assert proc.returncode == 0 and not errors, proc.stderr
    out = (root / "latin.py").read_bytes()
    assert out.startswith(b"# -*- coding: latin-1 -*-\nimport torch\n\nimport porter_runtime\n")
    assert b"name = 'caf\xe9'  # \xe0 la carte\n" in out and b"porter_runtime.device()" in out
    compile(out, "latin.py", "exec")


def test_bom_is_kept_first(tmp_path):
    root = make(tmp_path / "repo", {"bom.py": b"\xef\xbb\xbf" + CUDA})
    proc, errors, _ = migrate(root)
    assert proc.returncode == 0 and not errors
    assert (root / "bom.py").read_bytes() == b"\xef\xbb\xbf" + MIGRATED


def test_crlf_stays_crlf(tmp_path):
    root = make(tmp_path / "repo", {"crlf.py": CUDA.replace(b"\n", b"\r\n")})
    assert migrate(root)[0].returncode == 0
    assert (root / "crlf.py").read_bytes() == MIGRATED.replace(b"\n", b"\r\n")


def test_mixed_line_endings_keep_every_untouched_line(tmp_path):
    data = b"import torch\r\ny = 1\nx = torch.ones(1).cuda()\r\nz = 2\n# end\r\n"
    root = make(tmp_path / "repo", {"mixed.py": data})
    assert migrate(root)[0].returncode == 0
    out = (root / "mixed.py").read_bytes().splitlines(keepends=True)
    assert out == [b"import torch\r\n", b"\r\n", b"import porter_runtime\r\n", b"y = 1\n",
                   b"x = torch.ones(1).to(porter_runtime.device())\r\n", b"z = 2\n", b"# end\r\n"]


def test_tabs_are_kept(tmp_path):
    data = b"import torch\n\n\ndef f():\n\tif True:\n\t\treturn torch.ones(1).cuda()\t# tab\n"
    root = make(tmp_path / "repo", {"tabs.py": data})
    assert migrate(root)[0].returncode == 0
    out = (root / "tabs.py").read_bytes()
    assert b"\n\t\treturn torch.ones(1).to(porter_runtime.device())\t# tab\n" in out


@pytest.mark.parametrize("data", [b"", b"\n", b"# only a comment about .cuda()\n", b"\xef\xbb\xbf"])
def test_empty_files_are_clean(tmp_path, data):
    root = make(tmp_path / "repo", {"empty.py": data, "pkg/__init__.py": b""})
    proc, errors, report = migrate(root)
    assert proc.returncode == 0 and not errors, proc.stderr
    assert (root / "empty.py").read_bytes() == data
    assert report["summary"]["files_changed"] == 0
    assert not (root / "porter_runtime").exists()  # nothing changed: nothing vendored


def test_huge_generated_file_without_cuda_is_cheap_and_untouched(tmp_path):
    rows = b"".join(b"TABLE_%d = [%d, %d, 'row %d']\n" % (i, i, i * 7, i) for i in range(200_000))
    data = b"import torch\n" + rows  # ~7 MB: never parsed, nothing in it needs porting
    root = make(tmp_path / "repo", {"generated_pb2.py": data, "good.py": CUDA})
    proc, errors, _ = migrate(root)
    assert proc.returncode == 0 and not errors
    assert (root / "generated_pb2.py").read_bytes() == data
    assert (root / "good.py").read_bytes() == MIGRATED


def test_huge_generated_file_with_cuda_is_refused_clearly(tmp_path):
    """Parsing megabytes with LibCST takes minutes; a size limit turns that into a
    clear per-file error (the limit lives in the engine as MAX_PARSE_BYTES)."""
    import porter.engine.process

    limit = getattr(porter.engine.process, "MAX_PARSE_BYTES", None)
    if limit is None:
        pytest.skip("the engine has no parse size limit yet (issue 6: MAX_PARSE_BYTES)")
    rows = b"".join(b"TABLE_%d = [%d, %d]\n" % (i, i, i) for i in range(limit // 16))
    assert_bad_file(tmp_path, "huge.py", CUDA + rows, "MB")


# -- the file system -------------------------------------------------------------------

def test_symlinks_are_reported_not_followed(tmp_path):
    """Links to files inside and outside the tree, to folders, and loops: each is
    skipped with its reason (a deliberate choice, not a failure: exit 0), nothing behind
    a link changes, and a loop can't hang the walk."""
    outside = make(tmp_path / "outside", {"ext.py": CUDA, "pkg/mod.py": CUDA})
    root = make(tmp_path / "repo", {"real.py": CUDA})
    (root / "in_link.py").symlink_to("real.py")
    (root / "out_link.py").symlink_to(outside / "ext.py")
    (root / "out_dir").symlink_to(outside / "pkg", target_is_directory=True)
    (root / "self").symlink_to(".", target_is_directory=True)
    (root / "loop_a").symlink_to("loop_b")
    (root / "loop_b").symlink_to("loop_a")
    (root / "loop.py").symlink_to("loop_a")
    (root / "dangling.py").symlink_to("nowhere.py")
    before = snapshot(outside)
    proc, errors, report = migrate(root)
    assert proc.returncode == 0, proc.stderr
    assert not errors
    skipped = {s["path"]: s["reason"] for s in report["skipped"]}
    assert set(skipped) == {"in_link.py", "out_link.py", "out_dir", "self", "loop.py", "dangling.py"}
    assert set(skipped.values()) == {"symbolic link, not followed"}
    assert "out_link.py: skipped: symbolic link, not followed" in proc.stderr.decode()
    assert snapshot(outside) == before
    assert (root / "real.py").read_bytes() == MIGRATED
    for link in ("in_link.py", "out_link.py", "out_dir", "loop.py", "dangling.py"):
        assert (root / link).is_symlink()


def test_symlink_named_on_the_command_line_is_an_error(tmp_path):
    outside = make(tmp_path / "outside", {"ext.py": CUDA})
    root = tmp_path / "repo"
    root.mkdir()
    (root / "link.py").symlink_to(outside / "ext.py")
    proc = run_porter("migrate", root / "link.py", "--write", "-j", "1")
    assert proc.returncode == 2  # never a silent no-op that passes
    assert b"link.py: a symbolic link; porter never follows links" in proc.stderr
    assert (outside / "ext.py").read_bytes() == CUDA


def test_unreadable_file(tmp_path, monkeypatch):
    root = make(tmp_path / "repo", {"secret.py": CUDA, "good.py": CUDA})
    if os.geteuid() != 0:
        (root / "secret.py").chmod(0)
        try:
            proc, errors, _ = migrate(root)
        finally:
            (root / "secret.py").chmod(0o644)
        assert proc.returncode == 2 and errors == {"secret.py": "cannot read: Permission denied"}
        assert (root / "secret.py").read_bytes() == CUDA
        return
    # root reads every file whatever its mode: make the read itself fail, in process.
    from porter.engine.process import Options, process_file
    from porter.engine.registry import all_rules

    real = os.open

    def open_(path, flags, *args, **kwargs):
        if str(path).endswith("secret.py"):
            raise PermissionError(13, "Permission denied", str(path))
        return real(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", open_)
    result = process_file(root / "secret.py", "secret.py", Options(rules=all_rules()), None)
    assert (result.status, result.error) == ("error", "cannot read: Permission denied")


def test_read_only_file_is_not_written(tmp_path):
    root = make(tmp_path / "repo", {"frozen.py": CUDA, "good.py": CUDA})
    (root / "frozen.py").chmod(0o444)
    proc, errors, _ = migrate(root)
    assert proc.returncode == 2
    assert errors == {"frozen.py": "not written: the file is read-only"}  # a failed file in the report
    assert b"frozen.py: error: not written: the file is read-only" in proc.stderr
    assert (root / "frozen.py").read_bytes() == CUDA
    assert stat.S_IMODE((root / "frozen.py").stat().st_mode) == 0o444
    assert (root / "good.py").read_bytes() == MIGRATED


def test_folder_named_like_a_python_file(tmp_path):
    root = make(tmp_path / "repo", {"models.py/net.py": CUDA})
    proc, errors, _ = migrate(root)
    assert proc.returncode == 0 and not errors, proc.stderr
    out = (root / "models.py" / "net.py").read_bytes()
    assert b"x = torch.ones(1).to(porter_runtime.device())" in out  # no sys.path code: a plain import
    compile(out, "net.py", "exec")
    proc = run_porter("migrate", root / "models.py", "--check", "-j", "1")
    assert proc.returncode == 0, proc.stderr  # named directly: walked as a folder


def test_fifo_named_like_a_python_file_does_not_hang(tmp_path):
    root = make(tmp_path / "repo", {"good.py": CUDA})
    os.mkfifo(root / "pipe.py")
    proc, errors, _ = migrate(root)
    assert proc.returncode == 0 and not errors
    proc = run_porter("migrate", root / "pipe.py", "-j", "1")
    assert proc.returncode == 0 and b"pipe.py: skipped: not a regular file or folder" in proc.stderr


def test_missing_target_path(tmp_path):
    proc = run_porter("migrate", tmp_path / "nope", "--write")
    assert proc.returncode == 2
    assert f"porter: error: {tmp_path / 'nope'}: no such file or folder".encode() in proc.stderr
    assert not (tmp_path / "nope").exists() and list(tmp_path.iterdir()) == []


def test_missing_path_beside_a_real_one(tmp_path):
    root = make(tmp_path / "repo", {"good.py": CUDA})
    proc = run_porter("migrate", root, tmp_path / "nope", "--write", "-j", "1")
    assert proc.returncode == 2 and b"no such file or folder" in proc.stderr
    assert (root / "good.py").read_bytes() == CUDA  # inputs are checked before anything is written


def test_non_python_files_named_on_the_command_line(tmp_path):
    root = make(tmp_path / "repo", {"notes.txt": b"call .cuda() here\n", "blob.bin": b"\x00\x01cuda",
                                    "good.py": CUDA})
    before = snapshot(root)
    proc = run_porter("migrate", root / "notes.txt", root / "blob.bin", "--write", "-j", "1")
    assert proc.returncode == 0, proc.stderr
    err = proc.stderr.decode()
    assert "notes.txt: skipped: not a Python file or a file any rule reads" in err
    assert "blob.bin: skipped: not a Python file or a file any rule reads" in err
    assert snapshot(root) == before


def test_files_vanishing_during_the_run(tmp_path):
    """A file deleted after discovery is an error; one deleted (or edited) after it was
    read is not written back: porter never resurrects or clobbers a file."""
    from porter.files.apply import Change, apply_changes
    from porter.engine.process import Options, process_file
    from porter.engine.registry import all_rules

    root = make(tmp_path / "repo", {"gone.py": CUDA, "later.py": CUDA, "edited.py": CUDA})
    (root / "gone.py").unlink()
    result = process_file(root / "gone.py", "gone.py", Options(rules=all_rules()), None)
    assert (result.status, result.error) == ("error", "cannot read: No such file or directory")

    changes = [Change("later.py", CUDA, MIGRATED), Change("edited.py", CUDA, MIGRATED)]
    (root / "later.py").unlink()
    (root / "edited.py").write_bytes(CUDA + b"y = 2\n")
    failed = dict(apply_changes(root, changes))
    assert failed == {"later.py": "not written: the file vanished during the run",
                      "edited.py": "not written: the file changed on disk during the run"}
    assert not (root / "later.py").exists()
    assert (root / "edited.py").read_bytes() == CUDA + b"y = 2\n"


def test_target_code_is_never_executed(tmp_path):
    """Porter reads target files as text: modules with import-time side effects, and
    modules named like porter's own dependencies in the folder it runs from (which
    ``python -m`` puts first on sys.path), never run."""
    marker = tmp_path / "executed"
    payload = f"import pathlib\npathlib.Path({str(marker)!r}).write_text('ran')\n".encode()
    files = {name: payload + CUDA for name in ("evil.py", "setup.py", "conftest.py", "pkg/__init__.py")}
    files.update({f"{name}.py": payload for name in ("libcst", "click", "rich", "torch", "sitecustomize")})
    root = make(tmp_path / "repo", files)
    porter_script = shutil.which("porter") or str(Path(sys.executable).with_name("porter"))
    import subprocess

    proc = subprocess.run([porter_script, "migrate", ".", "--write", "-j", "2"], cwd=root, capture_output=True)
    assert proc.returncode == 0, proc.stderr
    proc = run_porter("migrate", ".", "--check", "-j", "1", cwd=root)  # python -m porter, from inside
    assert proc.returncode == 0, proc.stderr
    assert not marker.exists()
    assert b"porter_runtime.device()" in (root / "evil.py").read_bytes()


def test_a_folder_porter_cannot_list_is_exit_2(tmp_path, monkeypatch):
    """root can list every folder, so the listing itself is made to fail, in process."""
    import os as os_module

    from click.testing import CliRunner

    from porter.cli.app import cli

    root = make(tmp_path / "repo", {"ok.py": CUDA, "locked/x.py": CUDA})
    real = os_module.scandir

    def scandir(path="."):
        if str(path).endswith("locked"):
            raise PermissionError(13, "Permission denied", str(path))
        return real(path)

    monkeypatch.setattr("porter.engine.discover.os.scandir", scandir)
    report = tmp_path / "r.json"
    result = CliRunner().invoke(cli, ["migrate", str(root), "-j", "1", "--report", str(report)])
    assert result.exit_code == 2, result.output
    skipped = json.loads(report.read_text())["skipped"]
    assert skipped == [{"path": "locked", "reason": "cannot list folder: Permission denied", "error": True}]


@pytest.mark.parametrize("enabled", [True, False])
def test_the_cycle_collector_is_left_as_it_was_found(tmp_path, enabled):
    # porter pauses Python's cycle collector while it processes a file (parsing makes
    # millions of acyclic nodes); a port, a failure and an error all give it back.
    import gc

    from porter.engine.process import Options, process_file
    from porter.engine.registry import all_rules

    files = {"ok.py": b"import torch\nx = torch.zeros(2).cuda()\n", "broken.py": b"def f(:\n    x.cuda()\n"}
    options = Options(rules=list(all_rules()))
    was = gc.isenabled()
    try:
        (gc.enable if enabled else gc.disable)()
        for name, data in files.items():
            (tmp_path / name).write_bytes(data)
            result = process_file(tmp_path / name, name, options, None)
            assert result.status == ("changed" if name == "ok.py" else "error")
            assert gc.isenabled() is enabled
    finally:
        (gc.enable if was else gc.disable)()
