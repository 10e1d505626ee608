"""The Markdown report's "How to test on a Mac" holds the repository's own command, as its
README documents it, or a placeholder nobody can mistake for a command: never a fixed
``python train.py --max_steps 2`` that fails on a repository whose flag is another."""

import os
import shlex
import shutil
from pathlib import Path

from porter.report.entry_point import EntryPoint, find, mac_commands
from porter_test_utils import run_porter

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "repos"
GOLDEN = Path(__file__).parent / "data" / "report_golden_entry_point.md"


def _tree(tmp_path, readme: str, scripts=("train.py",)) -> Path:
    root = tmp_path / "repo"
    root.mkdir()
    (root / "README.md").write_text(readme)
    for script in scripts:
        (root / script).parent.mkdir(parents=True, exist_ok=True)
        (root / script).write_text("import torch\nprint(torch.ones(1).cuda())\n")
    return root


def test_the_readme_command_is_taken_as_written(tmp_path):
    root = _tree(tmp_path, "# x\n\nTrain it:\n\n```bash\n$ python train.py --max_iters 2000 \\\n"
                           "    --out_dir runs   # the baseline\n```\n")
    assert find(root) == EntryPoint("python train.py --max_iters 2000 --out_dir runs", "README.md:6")


def test_a_command_for_a_script_the_tree_lacks_is_not_taken(tmp_path):
    root = _tree(tmp_path, "```sh\npip install -r requirements.txt\npython scripts/download.py\n"
                           "python -m torch.distributed.run x.py\n```\n", scripts=())
    assert find(root) is None


def test_training_comes_first_and_one_process_before_a_launcher(tmp_path):
    readme = ("```sh\npython prepare_data.py --n 10\n"
              "torchrun --nproc_per_node=8 train.py --config cfg.yaml\n"
              "CUDA_VISIBLE_DEVICES=0 python train.py --config cfg.yaml\n```\n")
    root = _tree(tmp_path, readme, scripts=("prepare_data.py", "train.py"))
    assert find(root) == EntryPoint("CUDA_VISIBLE_DEVICES=0 python train.py --config cfg.yaml", "README.md:4")


def test_an_indented_block_and_a_module_entry_point(tmp_path):
    root = _tree(tmp_path, "Run:\n\n    python -m mypkg.train --epochs 1\n", scripts=("mypkg/train.py",))
    assert find(root) == EntryPoint("python -m mypkg.train --epochs 1", "README.md:3")


def test_prose_is_not_a_command(tmp_path):
    root = _tree(tmp_path, "Then python train.py trains it, see train.py.\n")
    assert find(root) is None


def test_the_placeholder_says_it_is_one():
    text = mac_commands(None)
    assert "<your entry point" in text and "placeholders" in text
    assert "train.py" not in text and "--max_steps" not in text


def test_a_command_with_quotes_is_quoted_for_run():
    entry = EntryPoint("python sample.py --prompt \"a cat\"", "README.md:3")
    text = mac_commands(entry)
    line = next(x for x in text.splitlines() if x.startswith("porter verify . --run"))
    assert shlex.split(line)[-1] == entry.command


def test_report_golden_on_a_fixture_whose_entry_point_takes_other_flags(tmp_path):
    """llm_scratch's README runs ``python train.py --steps 1000 ...``: the report says that,
    byte for byte (PORTER_UPDATE_GOLDEN=1 rewrites the golden file)."""
    root = tmp_path / "llm_scratch"
    shutil.copytree(FIXTURES / "llm_scratch", root)
    out = tmp_path / "port.md"
    proc = run_porter("migrate", root, "--report", out)
    assert proc.returncode in (0, 1), proc.stderr
    text = out.read_text()
    if os.environ.get("PORTER_UPDATE_GOLDEN"):
        GOLDEN.write_text(text)
    assert 'porter verify . --run \'python train.py --steps 1000 --batch-size 64 --out runs/base\'' in text
    assert "--max_steps" not in text and "<your entry point" not in text
    assert str(tmp_path) not in text
    assert text == GOLDEN.read_text()


def test_information_items_are_not_checkboxes(tmp_path):
    from porter.report.markdown import to_markdown

    report = {
        "root": str(tmp_path), "mode": "check", "tool": {"version": "0"},
        "summary": {"files_changed": 0, "rewrites": 0, "files_scanned": 1, "findings": 1},
        "rules": [], "skipped": [], "runtime": {"changes": [], "notes": []}, "ledger": None,
        "files": [{"path": str(tmp_path / "a.py"), "status": "ok", "rewrites": [], "findings": [
            {"code": "PT202", "line": 3, "message": "a guard", "suggestion": "", "severity": "info"},
            {"code": "PT101", "line": 4, "message": "a blocker", "suggestion": "", "severity": "review"}]}],
    }
    text = to_markdown(report)
    assert "- [ ] `a.py:4` **PT101**" in text
    assert "- `a.py:3` **PT202**" in text and "- [ ] `a.py:3`" not in text
