"""Porter owns its processes: on every exit path (SIGTERM, SIGHUP, Ctrl-C, a full disk on
stdout, a module that double-forks a daemon) nothing it started is left running, no
temporary folder is left behind, and the exit status says what happened. Signals are
sent for real to a real ``porter`` process; the processes are read from /proc."""

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads processes from /proc")

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "repos" / "llm_scratch"


def _children() -> dict[int, int]:
    """pid -> parent pid, for every process."""
    out = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            out[int(entry)] = int(stat.rsplit(")", 1)[1].split()[1])
    return out


def _descendants(pid: int) -> set[int]:
    parents = _children()
    found, frontier = set(), {pid}
    while frontier:
        frontier = {p for p, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


def _alive(pids) -> set[int]:
    alive = set()
    for pid in pids:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z":
            alive.add(pid)
    return alive


def _marked(token: str) -> set[int]:
    """Processes whose environment holds ``TEST_MARK=token`` (they may have left every group)."""
    found = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if f"TEST_MARK={token}".encode() in Path(f"/proc/{entry}/environ").read_bytes().split(b"\0"):
                    found.add(int(entry))
            except OSError:
                continue
    return found


def _wait_for(predicate, seconds: float = 60.0):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    return predicate()


def _tree(tmp_path: Path, copies: int = 30) -> Path:
    root = tmp_path / "repo"
    root.mkdir()
    (root / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    for i in range(copies):
        shutil.copytree(FIXTURE, root / f"part{i}")
    return root


def _porter(*args, tmp_path: Path, **kwargs) -> subprocess.Popen:
    env = {**os.environ, "TMPDIR": str(tmp_path / "tmp"), "TEST_MARK": tmp_path.name}
    (tmp_path / "tmp").mkdir(exist_ok=True)
    return subprocess.Popen([sys.executable, "-m", "porter", *map(str, args)], env=env,
                            stdout=kwargs.pop("stdout", subprocess.DEVNULL), stderr=subprocess.PIPE, **kwargs)


@pytest.mark.parametrize("signum, code", [(signal.SIGTERM, 143), (signal.SIGHUP, 129)])
def test_a_signal_ends_migrate_and_its_workers(tmp_path, signum, code):
    root = _tree(tmp_path)
    proc = _porter("migrate", root, "--diff", "-j", "2", "--no-progress", tmp_path=tmp_path)
    workers = _wait_for(lambda: _descendants(proc.pid) if len(_descendants(proc.pid)) >= 2 else set())
    assert len(workers) >= 2, "the worker processes never started"
    proc.send_signal(signum)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == code, err
    assert b"Traceback" not in err
    assert not _wait_for(lambda: not _alive(workers), 30) is False
    assert not _alive(workers)


def test_a_worker_ends_when_its_parent_is_killed(tmp_path):
    """SIGKILL gives porter no chance to shut its pool: each worker notices on its own."""
    root = _tree(tmp_path)
    proc = _porter("migrate", root, "--diff", "-j", "2", "--no-progress", tmp_path=tmp_path)
    workers = _wait_for(lambda: _descendants(proc.pid) if len(_descendants(proc.pid)) >= 2 else set())
    assert workers
    proc.kill()
    proc.wait()
    assert _wait_for(lambda: not _alive(workers), 30)


def test_diff_to_a_full_disk_is_a_one_line_error(tmp_path):
    root = _tree(tmp_path, copies=3)
    with open("/dev/full", "wb") as full:
        proc = _porter("migrate", root, "--diff", "-j", "2", "--no-progress", tmp_path=tmp_path, stdout=full)
        _, err = proc.communicate(timeout=300)
    assert proc.returncode == 2
    assert b"Traceback" not in err and b"internal error" not in err
    assert b"porter: error: can't write the output: No space left on device" in err
    assert not _alive(_marked(tmp_path.name))


def test_ctrl_c_while_starting_prints_no_traceback(tmp_path):
    """Ctrl-C while porter imports its commands (about a second): exit 130, no traceback.
    The import log on stderr says when those imports have begun."""
    proc = subprocess.Popen([sys.executable, "-X", "importtime", "-m", "porter", "migrate", str(tmp_path), "--check"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    seen = []
    for line in proc.stderr:
        seen.append(line)
        if line.split(b"|")[-1].strip() == b"click":  # the commands' imports (porter.cli.app) have begun
            proc.send_signal(signal.SIGINT)
            break
    rest = proc.stderr.read()
    proc.wait(timeout=60)
    err = b"".join(seen) + rest
    assert b"Traceback" not in err, err.decode()
    assert b"porter: interrupted" in rest and proc.returncode == 130


def test_version_does_not_import_the_engine():
    out = subprocess.run([sys.executable, "-X", "importtime", "-m", "porter", "--version"],
                         capture_output=True, text=True, check=True)
    assert out.stdout.startswith("porter, version ")
    imported = {line.split("|")[-1].strip() for line in out.stderr.splitlines() if "|" in line}
    assert not {"libcst", "click", "rich", "porter.engine.run", "porter.rulebase"} & imported


def _sleeper_tree(tmp_path: Path, daemon: bool) -> Path:
    root = tmp_path / "repo"
    root.mkdir()
    (root / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    body = "import time\ntime.sleep(120)\n"
    if daemon:  # fork, setsid, fork: the grandchild leaves every process group and keeps the pipes
        body = ("import os, time\n"
                "if os.fork() == 0:\n"
                "    os.setsid()\n"
                "    if os.fork() == 0:\n"
                "        time.sleep(300)\n"
                "    os._exit(0)\n"
                "time.sleep(120)\n")
    main = '\nif __name__ == "__main__":  # a module, not a script: verify imports all of it\n    pass\n'
    (root / "a_sleeps.py").write_text(body + main)
    (root / "b_sleeps.py").write_text("import time\ntime.sleep(120)\n" + main)
    return root


def test_sigterm_ends_verify_its_children_and_its_temp_folder(tmp_path):
    root = _sleeper_tree(tmp_path, daemon=False)
    proc = _porter("verify", root, "-j", "1", "--timeout", "100", tmp_path=tmp_path)
    children = _wait_for(lambda: _marked(tmp_path.name) - {proc.pid})
    assert children
    time.sleep(1.0)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 143, err
    assert _wait_for(lambda: not _alive(_marked(tmp_path.name)), 30)
    assert not list((tmp_path / "tmp").glob("porter-verify-*"))


def test_a_double_forked_daemon_neither_hangs_verify_nor_outlives_it(tmp_path):
    root = _sleeper_tree(tmp_path, daemon=True)
    proc = _porter("verify", root, "-j", "1", "--timeout", "2", tmp_path=tmp_path, stdout=subprocess.PIPE)
    out, err = proc.communicate(timeout=120)  # it hung for ever: the daemon held the worker's pipe
    assert proc.returncode == 1, err
    assert b"2 timed out" in out, out.decode()
    assert _wait_for(lambda: not _alive(_marked(tmp_path.name)), 30)
    assert not list((tmp_path / "tmp").glob("porter-verify-*"))


def test_an_enormous_timeout_means_no_limit(tmp_path):
    root = tmp_path / "repo"
    root.mkdir()
    (root / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    (root / "m.py").write_text("X = 1\n")
    proc = _porter("verify", root, "--timeout", "1e10", "--run", "true", "--run-timeout", "1e12",
                   tmp_path=tmp_path)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err.decode()
    assert b"CRASHED" not in err and b"OverflowError" not in err
