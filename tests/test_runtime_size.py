"""A runtime sized to the port: a copy holds the modules the ported code uses, and runs.

Real ports of small repositories, then the ported code run on the CPU with real torch
(the copy must import and answer every name the port calls), plus a proof over every
public name that the modules porter picks for it are enough to use it.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from porter.files.apply import runtime_files, runtime_source
from porter.files.runtime_shake import held
from porter.project.vendoring.runtime_modules import modules_for, parts_for, used_names
from porter_test_utils import run_porter

SOURCE = runtime_source()
ALL_MODULES = {p.relative_to(SOURCE).with_suffix("").as_posix() for p in SOURCE.rglob("*.py")}


def _repo(tmp_path: Path, files: dict[str, str]) -> Path:
    repo = tmp_path / "repo"
    repo.mkdir(parents=True)
    (repo / "requirements.txt").write_text("torch\n")
    for name, text in files.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(textwrap.dedent(text))
    return repo


def _held(repo: Path) -> set[str]:
    folder = repo / "porter_runtime"
    return {p.relative_to(folder).with_suffix("").as_posix() for p in folder.rglob("*.py")}


def _run(repo: Path, script: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, script], cwd=repo, capture_output=True, text=True, timeout=300,
                          env={"CUDA_VISIBLE_DEVICES": "", "PATH": "/usr/bin:/bin"})


TRAIN = """\
    import torch

    model = torch.nn.Linear(4, 2).cuda()
    x = torch.randn(3, 4).cuda()
    print(model(x).sum().item() == model(x).sum().item())
"""


def test_a_port_that_only_moves_tensors_vendors_the_core_and_runs(tmp_path):
    repo = _repo(tmp_path, {"train.py": TRAIN})
    assert run_porter("migrate", repo, "--write", "-q").returncode == 0
    assert _held(repo) == {"__init__", "_compat", "_device", "_log"}
    proc = _run(repo, "train.py")
    assert proc.returncode == 0 and proc.stdout.strip() == "True", proc.stderr
    again = run_porter("migrate", repo, "--diff", "-q")
    assert again.returncode == 0 and again.stdout == b""  # the fixed point: nothing to add


def test_a_later_port_adds_the_modules_its_new_code_uses(tmp_path):
    repo = _repo(tmp_path, {"train.py": TRAIN})
    run_porter("migrate", repo, "--write", "-q")
    before = held(repo / "porter_runtime", SOURCE)
    (repo / "bench.py").write_text(textwrap.dedent("""\
        import torch

        net = torch.compile(torch.nn.Linear(4, 4))
        torch.cuda.synchronize()
        print(type(net).__name__)
    """))
    proc = run_porter("migrate", repo, "--write")
    assert proc.returncode == 0, proc.stderr
    assert {"_compile", "twins/device_calls", "twins/__init__"} <= _held(repo)
    assert before < held(repo / "porter_runtime", SOURCE)  # what it held stays, and more
    assert b"added" in proc.stderr and b"_compile.py" in proc.stderr
    for script in ("train.py", "bench.py"):
        run = _run(repo, script)
        assert run.returncode == 0, run.stderr


def test_code_that_imports_names_from_the_runtime_gets_all_of_it(tmp_path):
    repo = _repo(tmp_path, {"train.py": TRAIN})
    run_porter("migrate", repo, "--write", "-q")
    assert _held(repo) == {"__init__", "_compat", "_device", "_log"}
    (repo / "probe.py").write_text("from porter_runtime import device_count\n\nprint(device_count())\n")
    run_porter("migrate", repo, "--write", "-q")
    assert _held(repo) == ALL_MODULES
    assert _run(repo, "probe.py").returncode == 0


def test_full_runtime_vendors_every_module(tmp_path):
    repo = _repo(tmp_path, {"train.py": TRAIN})
    assert run_porter("migrate", repo, "--write", "-q", "--full-runtime").returncode == 0
    assert _held(repo) == ALL_MODULES
    settings = _repo(tmp_path / "other", {"train.py": TRAIN, "porter.toml": "full-runtime = true\n"})
    run_porter("migrate", settings, "--write", "-q")
    assert _held(settings) == ALL_MODULES


def test_a_name_whose_module_is_not_vendored_says_how_to_get_it(tmp_path):
    repo = _repo(tmp_path, {"train.py": TRAIN})
    run_porter("migrate", repo, "--write", "-q")
    (repo / "late.py").write_text("import porter_runtime\n\nporter_runtime.compile\n")
    proc = _run(repo, "late.py")
    assert proc.returncode == 1
    assert "has no attribute 'compile': a vendored copy holds only what the ported code used" in proc.stderr
    assert "--full-runtime" in proc.stderr


@pytest.mark.parametrize(("source", "names"), [
    (b"import porter_runtime\nx = porter_runtime.device()\n", {"device"}),
    (b"from pkg import porter_runtime  # runtime\ny = porter_runtime . compile(m)\n", {"compile"}),
    (b"import porter_runtime\n# porter_runtime.attention is used below\nporter_runtime.bnb_optim.AdamW8bit\n",
     {"attention", "bnb_optim"}),  # a comment's name costs a module, never a missing one
    (b"from porter_runtime import device\n", None),
    # merged into the package's own import list, as porter writes it (guided-diffusion)
    (b"from guided_diffusion import dist_util, logger, porter_runtime\nporter_runtime.ddp_device_ids(0)\n",
     {"ddp_device_ids"}),
    (b"from pkg import (\n    logger,\n    porter_runtime,\n)\nporter_runtime.device()\n", {"device"}),
    (b"from pkg import logger, porter_runtime as rt\n", None),
    (b"import torch\r\nimport porter_runtime\r\nd = porter_runtime.device_str()\r\n", {"device_str"}),  # CRLF
    (b"import porter_runtime as rt\n", None),
    (b"import porter_runtime\nf = getattr(porter_runtime, name)\n", None),
    # a notebook: its code cells are read, not its JSON (DiT's run_DiT.ipynb)
    (b'{"cells": [{"cell_type": "code", "source": ["import porter_runtime\\n", "x = porter_runtime.device()"]}]}',
     {"device"}),
])
def test_used_names_reads_what_porter_writes_and_gives_up_on_the_rest(source, names):
    found = used_names(source)
    assert (None if found is None else set(found)) == names


def test_an_unknown_name_takes_the_whole_runtime():
    assert modules_for({"no_such_name"}, SOURCE) is None
    # the core, and what porter fit and porter verify --emulate use of a copy
    assert modules_for({"__version__", "MPS_FALLBACK_SET"}, SOURCE) == {"__init__", "_compat", "_device", "_log"}


def test_every_public_name_works_from_the_modules_porter_picks_for_it(tmp_path):
    """For each name in ``_EXPORTS``: a copy holding only what parts_for({name}) keeps,
    under a package name of its own so no module leaks from one copy to the next, imports
    and yields the name."""
    import ast

    tree = ast.parse((SOURCE / "__init__.py").read_text())
    exports = next(ast.literal_eval(n.value) for n in tree.body if isinstance(n, ast.Assign)
                   and any(getattr(t, "id", "") == "_EXPORTS" for t in n.targets))
    lines = []
    for i, name in enumerate(sorted(exports)):
        package = tmp_path / f"rt_{i}"
        package.mkdir()
        for file, data in runtime_files(parts_for({name}, SOURCE)).items():
            (package / file).parent.mkdir(parents=True, exist_ok=True)
            (package / file).write_bytes(data)
        lines.append(f"import rt_{i}; assert rt_{i}.{name} is not None, {name!r}")
    script = tmp_path / "check.py"
    script.write_text("\n".join(lines) + "\nprint('ok')\n")
    proc = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-3000:]


def test_a_dry_run_shows_each_runtime_file_once(tmp_path):
    """Two files needing different modules: --diff once showed the core twice (the second
    file's modules were added to a copy that a dry run had not written), and git apply
    refused the patch. The diff applied with git equals --write."""
    repo = _repo(tmp_path, {"a.py": TRAIN, "b.py": "import torch\n\nnet = torch.compile(torch.nn.Linear(2, 2))\n"})
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    diff = run_porter("migrate", repo, "--diff", "-q").stdout
    headers = [line for line in diff.splitlines() if line.startswith(b"diff --git")]
    assert len(headers) == len(set(headers)) and b"+++ b/porter_runtime/_compile.py" in diff
    applied = tmp_path / "applied"
    subprocess.run(["cp", "-r", str(repo), str(applied)], check=True)
    subprocess.run(["git", "apply"], cwd=applied, input=diff, check=True)
    run_porter("migrate", repo, "--write", "-q")
    for path in sorted(p for p in repo.rglob("*") if p.is_file() and ".git" not in p.parts):
        assert (applied / path.relative_to(repo)).read_bytes() == path.read_bytes(), path


def test_the_tools_hand_a_sized_copy_the_modules_they_run_it_with(tmp_path):
    """A copy sized to a port holds neither porter fit's peak-memory recorder nor the MPS
    emulation. With the tool's variable set and nothing supplied, importing the runtime says
    which command supplies the module; with the folder ``supply`` fills (what porter fit and
    porter verify --emulate pass to the child), the same copy records and emulates."""
    from porter.project.vendoring.runtime_modules import supply

    repo = _repo(tmp_path, {"train.py": TRAIN})
    assert run_porter("migrate", repo, "--write", "-q").returncode == 0
    assert not {"tools/peak", "tools/emulate", "tools/mps_coverage", "tools/__init__"} & _held(repo)
    probe = "import porter_runtime, sys; print(sorted(m for m in sys.modules if m.startswith('porter_runtime.')))"
    base = {"CUDA_VISIBLE_DEVICES": "", "PATH": "/usr/bin:/bin"}
    for variable, value, tool in (("PORTER_PEAK_MEMORY_FILE", str(tmp_path / "peak.jsonl"), "fit"),
                                  ("PORTER_EMULATE", "mps", "emulate")):
        bare = subprocess.run([sys.executable, "-c", probe], cwd=repo, capture_output=True, text=True,
                              timeout=300, env={**base, variable: value})
        assert bare.returncode == 1 and f"porter {'fit' if tool == 'fit' else 'verify --emulate mps'}" in bare.stderr
        env = {**base, variable: value, **supply(tmp_path / f"extra-{tool}", tool)}
        done = subprocess.run([sys.executable, "-c", probe], cwd=repo, capture_output=True, text=True,
                              timeout=300, env=env)
        assert done.returncode == 0, done.stderr
        wanted = "porter_runtime.tools.peak" if tool == "fit" else "porter_runtime.tools.emulate"
        assert wanted in done.stdout
    assert not {"tools/peak", "tools/emulate", "tools/mps_coverage", "tools/__init__"} & _held(repo)  # nothing was written into the copy


def test_a_port_that_needs_less_keeps_what_the_copy_holds(tmp_path):
    """The code that used the most of the runtime goes; the copy stays as it is (another
    file, or a script outside the scanned paths, may use what it holds) and everything
    that is left runs."""
    repo = _repo(tmp_path, {"train.py": TRAIN, "bench.py": "import torch\n\ntorch.cuda.synchronize()\n"})
    assert run_porter("migrate", repo, "--write", "-q").returncode == 0
    before = {p.relative_to(repo): p.read_bytes() for p in (repo / "porter_runtime").rglob("*") if p.is_file()}
    (repo / "bench.py").unlink()
    assert run_porter("migrate", repo, "--write", "-q").returncode == 0
    assert {p.relative_to(repo): p.read_bytes() for p in (repo / "porter_runtime").rglob("*") if p.is_file()} == before
    assert run_porter("migrate", repo, "--diff", "-q").stdout == b""
    assert _run(repo, "train.py").returncode == 0
