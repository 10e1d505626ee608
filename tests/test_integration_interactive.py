"""``porter migrate --interactive``, driven with scripted answers through click's runner."""

import ast

from click.testing import CliRunner

from porter.cli.app import cli
from porter_test_utils import snapshot
from test_cli import make_tree

TRAIN = '''\
"""Train."""
import torch
from torch import device

model = torch.nn.Linear(2, 2).cuda()

DEV = device("cuda")


def step(x):
    torch.cuda.synchronize()
    return model(x.cuda())
'''


def interact(root, answers, *args):
    result = CliRunner().invoke(cli, ["migrate", str(root), "--interactive", "-j", "1", "-q", *args],
                                input="".join(a + "\n" for a in answers))
    return result


def test_yes_to_all_equals_write(tmp_path):
    left = make_tree(tmp_path / "left", {"train.py": TRAIN})
    right = make_tree(tmp_path / "right", {"train.py": TRAIN})
    result = interact(left, ["y"] * 3)
    assert result.exit_code == 0, result.output
    assert CliRunner().invoke(cli, ["migrate", str(right), "--write", "-j", "1", "-q"]).exit_code == 0
    assert snapshot(left) == snapshot(right)


def test_hunks_show_rule_code_and_message(tmp_path):
    root = make_tree(tmp_path / "r", {"train.py": TRAIN})
    result = interact(root, ["n", "n", "n"])
    out = result.output
    assert "PT001 cuda-method" in out and "PT002 torch-device-cuda" in out and "PT101 cuda-synchronize" in out
    assert "-model = torch.nn.Linear(2, 2).cuda()" in out
    assert "+model = torch.nn.Linear(2, 2).to(porter_runtime.device())" in out
    assert "(1/3) Apply this change [y,n,a,q,?]?" in out
    # Neighbouring lines are one hunk, with every rule that changed them.
    assert "(3/3)" in out and "PT101" in out.split("(2/3)")[1] and "PT001" in out.split("(2/3)")[1]
    assert (root / "train.py").read_text() == TRAIN  # all refused: nothing written
    assert not (root / "porter_runtime").exists()


def test_some_hunks_accepted(tmp_path):
    root = make_tree(tmp_path / "r", {"train.py": TRAIN})
    result = interact(root, ["n", "y", "n"])  # only DEV = device("cuda")
    assert result.exit_code == 0, result.output
    text = (root / "train.py").read_text()
    ast.parse(text)
    assert 'DEV = porter_runtime.device()' in text
    assert "from torch import device" in text  # still imported: a skipped hunk may need it
    assert ".cuda()" in text and "torch.cuda.synchronize()" in text
    assert text.startswith('"""Train."""\nimport torch\nfrom torch import device\n\nimport porter_runtime\n')
    assert (root / "porter_runtime" / "__init__.py").exists()


def test_all_of_this_rule_then_quit(tmp_path):
    root = make_tree(tmp_path / "r", {
        "a.py": "import torch\nx = torch.ones(1).cuda()\n\n\n\n\ny = torch.ones(1).cuda()\n\n\n\n\nz = torch.zeros(1, device='cuda')\n",
        "b.py": "import torch\nw = torch.ones(1).cuda()\n\ntorch.cuda.synchronize()\n",
    })
    # a.py: PT001 hunk -> a (so the second PT001 and b.py's PT001 are taken without asking),
    # then the PT004 hunk -> n; b.py: PT101 -> q.
    result = interact(root, ["a", "n", "q"])
    assert result.exit_code == 0, result.output
    assert result.output.count("Apply this change") == 3
    a, b = (root / "a.py").read_text(), (root / "b.py").read_text()
    assert a.count("porter_runtime.device()") == 2 and "device='cuda'" in a
    assert "w = torch.ones(1).to(porter_runtime.device())" in b and "torch.cuda.synchronize()" in b


def test_input_running_out_is_quit(tmp_path):
    root = make_tree(tmp_path / "r", {"train.py": TRAIN})
    result = interact(root, ["y"])
    assert result.exit_code == 0, result.output
    text = (root / "train.py").read_text()
    assert "torch.nn.Linear(2, 2).to(porter_runtime.device())" in text and 'device("cuda")' in text


def test_unknown_answer_shows_help(tmp_path):
    root = make_tree(tmp_path / "r", {"train.py": TRAIN})
    result = interact(root, ["x", "q"])
    assert "a - apply this change and every later change of the same rule(s)" in result.output
    assert (root / "train.py").read_text() == TRAIN


def test_interactive_notebook_is_one_hunk(tmp_path):
    import nbformat

    from test_integration_notebooks import make_notebook

    path = make_notebook(tmp_path / "r" / "nb.ipynb")
    result = interact(tmp_path / "r", ["y"])
    assert result.exit_code == 0, result.output
    assert "(cell 3)" in result.output
    assert "porter_runtime.synchronize()" in nbformat.read(str(path), as_version=4).cells[5].source


def test_the_summary_counts_what_was_written(tmp_path):
    root = make_tree(tmp_path / "r", {"train.py": TRAIN, "other.py": "import torch\nx = torch.ones(1).cuda()\n"})
    result = interact(root, ["n", "n", "y", "n"])  # other.py: no; train.py: the second hunk only
    assert result.exit_code == 0, result.output
    assert "wrote 1 file (1 of 4 changes accepted and written; 2 files had changes)" in result.stderr
    assert "Ported train.py" in result.stderr and "Ported other.py" not in result.stderr
    refused = make_tree(tmp_path / "s", {"train.py": TRAIN})
    result = interact(refused, ["n", "n", "n"])
    assert "wrote 0 files (0 of 3 changes" in result.stderr and "Ported" not in result.stderr
