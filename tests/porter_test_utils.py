"""Helpers shared by porter's tests (real subprocesses, byte-exact snapshots)."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"


def run_porter(*args, cwd=None, input=None):
    """Run the real CLI in a subprocess (stdout bytes kept exact)."""
    return subprocess.run(
        [sys.executable, "-m", "porter", *map(str, args)],
        cwd=cwd, capture_output=True, input=input, env={**os.environ, "NO_COLOR": "1"},
    )


def snapshot(root: Path) -> dict:
    """Every file under root with its bytes and mode (for byte-identity checks)."""
    out = {}
    for path in sorted(root.rglob("*")):
        if path.is_file() and not path.is_symlink() and "__pycache__" not in path.parts and ".git" not in path.parts:
            out[path.relative_to(root).as_posix()] = (path.read_bytes(), path.stat().st_mode)
    return out


WITHOUT_PORTER = Path(__file__).resolve().parent / "without_porter.py"


def python_without_porter(*args: str) -> list:
    """A command line that runs ``python ARGS`` with porter's installed packages hidden."""
    return [sys.executable, str(WITHOUT_PORTER), *args]
