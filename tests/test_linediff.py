"""The diff's line matcher (porter.files.linediff): difflib's own output on short files,
and on long ones (where difflib is quadratic: thousands of identical rewritten lines) a
diff that ``git apply`` applies to give the new file exactly."""

import difflib
import random
import shutil
import subprocess

import pytest

from porter.files.apply import Change, unified_diff
from porter.files.linediff import SHORT, unified_lines


def test_short_inputs_get_difflibs_own_diff():
    rng = random.Random(7)
    for _ in range(2000):
        a = [rng.choice("abcde\n") + "\n" for _ in range(rng.randint(0, 40))]
        b = [rng.choice("abcdef") + "\n" for _ in range(rng.randint(0, 40))]
        assert unified_lines(a, b) == list(difflib.unified_diff(a, b, lineterm="", n=3))[2:]


def _long_pair(rng: random.Random, functions: int) -> tuple[str, str]:
    """A generated module where most lines repeat (blank lines, the same body), and its
    port: bodies rewritten, some lines inserted, deleted and moved."""
    old, new = ["import torch\n", "\n"], ["import torch\n", "\n", "import porter_runtime\n"]
    for i in range(functions):
        body = ["def f%d(x):\n" % i, "    return x.cuda()\n", "\n", "\n"]
        old += body
        roll = rng.random()
        if roll < 0.6:
            new += [body[0], "    return x.to(porter_runtime.device())\n", "\n", "\n"]
        elif roll < 0.7:
            continue  # deleted
        elif roll < 0.8:
            new += body + ["# a comment\n", "\n"]
        else:
            new += body
    if rng.random() < 0.5:
        new += old[10:30]  # a block copied to the end
    return "".join(old), "".join(new)


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git apply")
@pytest.mark.parametrize("seed", range(4))
def test_a_long_files_diff_applies_with_git(tmp_path, seed):
    rng = random.Random(seed)
    old, new = _long_pair(rng, functions=800 + 200 * seed)
    assert old.count("\n") + new.count("\n") > SHORT  # the anchored path
    target = tmp_path / "m.py"
    target.write_text(old)
    patch = tmp_path / "m.patch"
    patch.write_bytes(unified_diff(Change("m.py", old.encode(), new.encode())))
    subprocess.run(["git", "apply", patch.name], cwd=tmp_path, check=True, capture_output=True)
    assert target.read_text() == new


def test_a_long_file_of_identical_lines_still_diffs_right(tmp_path):
    """No line is unique on either side: the gap is matched at its head and tail, or replaced."""
    old = "x = 1\n" * 3000
    new = "x = 1\n" * 1000 + "y = 2\n" + "x = 1\n" * 1999
    lines = unified_lines(old.splitlines(True), new.splitlines(True))
    assert [line for line in lines if line[:1] in "+-"] == ["-x = 1\n", "+y = 2\n"]
