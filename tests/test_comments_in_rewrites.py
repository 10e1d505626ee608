"""Issue 43: a comment inside a rewritten call's arguments survives the rewrite, through
the real CLI, and a second run changes nothing."""

import io
import tokenize

import pytest

from porter_test_utils import run_porter

CASES = {
    "comma": ("x.cuda(0,  # first gpu\n)\n", "# first gpu"),
    "keyword": ("x.cuda(non_blocking=True  # async copy\n)\n", "# async copy"),
    "device": ('d = torch.device("cuda"  # the gpu\n)\n', "# the gpu"),
    "seed": ("torch.cuda.manual_seed(\n    42,  # seed\n)\n", "# seed"),
    "own_line": ('y = torch.zeros(\n    3,\n    # where it lives\n    device="cuda",\n)\n', "# where it lives"),
}


def comments(data: bytes) -> list:
    return [t.string for t in tokenize.tokenize(io.BytesIO(data).readline) if t.type == tokenize.COMMENT]


@pytest.mark.parametrize("name", sorted(CASES))
def test_comment_inside_rewritten_call_is_kept(tmp_path, name):
    body, comment = CASES[name]
    path = tmp_path / "train.py"
    path.write_bytes(f"import torch\nx = torch.ones(2)\n{body}".encode())
    first = run_porter("migrate", tmp_path, "--write", "--no-progress")
    assert first.returncode == 0, first.stderr.decode()
    new = path.read_bytes()
    assert b"porter_runtime." in new  # the call was rewritten
    assert comments(new) == [comment]
    compile(new, "train.py", "exec")
    again = run_porter("migrate", tmp_path, "--diff", "--no-progress")
    assert again.stdout == b""
