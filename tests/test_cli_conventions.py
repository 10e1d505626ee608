"""porter's command line follows ruff's conventions, through the real CLI: colour by
NO_COLOR / FORCE_COLOR / a terminal, no markup or emoji codes read from file text, one
error style, one flag spelling, quiet hooks, plain output when piped."""

import json
import os
import pty
import re
import subprocess
import sys
from pathlib import Path

import pytest

from porter_test_utils import ROOT
from test_cli import SAMPLE, make_tree

#: An SGR sequence (a colour or a style); cursor moves are not colour.
SGR = re.compile(rb"\x1b\[[0-9;]*m")


def env_with(**values) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "FORCE_COLOR", "TTY_COMPATIBLE")}
    env["COLUMNS"] = "200"
    env.update(values)
    return env


def porter(*args, cwd=None, input=None, **env):
    """The real CLI, piped (stdout and stderr are files), in the environment given."""
    return subprocess.run([sys.executable, "-m", "porter", *map(str, args)], cwd=cwd, input=input,
                          capture_output=True, env=env_with(**env))


def porter_on_terminal(*args, cwd=None, **env) -> tuple[int, bytes]:
    """The real CLI with stdout and stderr on a terminal (a pseudo-terminal); its exit
    code and everything it wrote there."""
    master, slave = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "porter", *map(str, args)], cwd=cwd, env=env_with(**env),
                            stdin=subprocess.DEVNULL, stdout=slave, stderr=slave)
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    os.close(master)
    return proc.wait(), b"".join(chunks)


@pytest.fixture
def tree(tmp_path):
    return make_tree(tmp_path / "repo", SAMPLE)


# -- 1. colour ---------------------------------------------------------------------------

def test_a_terminal_gets_colour_and_no_color_turns_it_off_everywhere(tree):
    code, out = porter_on_terminal("migrate", ".", "--diff", "--no-progress", cwd=tree)
    assert code == 0 and SGR.search(out), out  # diff and tables coloured on a terminal
    code, out = porter_on_terminal("migrate", ".", "--diff", "--no-progress", cwd=tree, NO_COLOR="1")
    assert code == 0 and b"+import porter_runtime" in out and b"porter migrate" in out
    assert not SGR.search(out), out  # neither the diff nor the summary's tables
    code, out = porter_on_terminal("migrate", ".", cwd=tree, NO_COLOR="1")  # the progress bar too
    assert code == 0 and not SGR.search(out), out


def test_force_color_colours_a_pipe_and_no_color_wins_over_it(tree):
    plain = porter("migrate", ".", "--diff", cwd=tree)
    assert plain.returncode == 0 and not SGR.search(plain.stdout) and not SGR.search(plain.stderr)
    forced = porter("migrate", ".", "--diff", cwd=tree, FORCE_COLOR="1")
    assert forced.returncode == 0 and SGR.search(forced.stdout) and SGR.search(forced.stderr)
    both = porter("migrate", ".", "--diff", cwd=tree, FORCE_COLOR="1", NO_COLOR="1")
    assert both.returncode == 0 and not SGR.search(both.stdout) and not SGR.search(both.stderr), both.stderr
    assert both.stdout == plain.stdout  # a diff `git apply` takes, whatever the environment


# -- 2. no markup or emoji codes from file text -----------------------------------------------

ODD = {
    "[bold]odd[/bold].py": "import torch\nx = torch.zeros(1).cuda()\n",
    "tools/report.py": "import subprocess\n" + "\n" * 98 + "subprocess.run(['nvidia-smi'])\n",
    "[red]bad.py": "import torch\nx = torch.ones(1).cuda(\n",
}


def test_paths_and_messages_print_literally_to_a_file(tmp_path):
    root = make_tree(tmp_path / "repo", ODD)
    proc = porter("migrate", ".", "--check", cwd=root)
    err = proc.stderr.decode()
    assert "tools/report.py:100:1 PT111 " in err, err  # never 💯
    assert "\N{HUNDRED POINTS SYMBOL}" not in err
    assert "Would port [bold]odd[/bold].py" in err
    assert "[red]bad.py: error: syntax error" in err
    assert proc.returncode == 2


def test_paths_and_messages_print_literally_on_a_terminal(tmp_path):
    root = make_tree(tmp_path / "repo", ODD)
    code, out = porter_on_terminal("migrate", ".", "--check", "--no-progress", cwd=root)
    text = out.decode()
    assert "tools/report.py:100:1 PT111 " in text and "\N{HUNDRED POINTS SYMBOL}" not in text, text
    assert "Would port [bold]odd[/bold].py" in text and "[red]bad.py: error: syntax error" in text
    assert code == 2


# -- 4. one error style, one flag spelling ------------------------------------------------

@pytest.mark.parametrize("args", [
    ("migrate", ".", "--bogus"),
    ("migrate", ".", "--fail-on", "sometimes"),
    ("migrate", ".", "--jobs", "0"),
    ("verify", ".", "--output-format", "xml"),
    ("explain",),
])
def test_usage_errors_print_as_porter_errors_and_exit_2(tree, args):
    proc = porter(*args, cwd=tree)
    err = proc.stderr.decode()
    assert proc.returncode == 2, err
    assert err.startswith("porter: error: "), err
    assert "Error:" not in err
    assert re.search(r"^Try 'porter \w+ --help' for help\.$", err, re.M), err


def test_porters_own_errors_and_click_errors_share_the_style(tree):
    own = porter("migrate", "missing/", cwd=tree)
    usage = porter("migrate", ".", "--select", cwd=tree)  # --select needs a value
    settings = porter("migrate", ".", "--select", "XYZ", cwd=tree)
    for proc in (own, usage, settings):
        assert proc.returncode == 2 and proc.stderr.startswith(b"porter: error: "), proc.stderr


def test_verify_and_migrate_share_output_format(tmp_path):
    root = make_tree(tmp_path / "repo", {"m.py": "x = 1\n"})
    proc = porter("verify", ".", "--output-format", "json", "-j", "1", cwd=root)
    assert proc.returncode == 0, proc.stderr
    assert [m["path"] for m in json.loads(proc.stdout)["modules"]] == ["m.py"]
    old = porter("verify", ".", "--format", "json", "-j", "1", cwd=root)  # the old spelling still works
    assert old.returncode == 0 and [(m["path"], m["status"]) for m in json.loads(old.stdout)["modules"]] == [
        ("m.py", "ok")]
    for command in ("verify", "migrate"):
        help_text = porter(command, "--help").stdout.decode()
        assert "--output-format" in help_text
        assert not re.search(r"^\s+--format\b", help_text, re.M), help_text  # hidden: one spelling shown


# -- 7. quiet hooks, plain pipes ------------------------------------------------------------

def _hook_entries() -> dict:
    hooks, current = {}, None
    for line in (ROOT / ".pre-commit-hooks.yaml").read_text().splitlines():
        if line.startswith("- id: "):
            current = hooks.setdefault(line[6:].strip(), {})
        elif current is not None and line.startswith("  entry: "):
            current["entry"] = line[len("  entry: "):].split()
    return hooks


FINDING_OR_FILE = re.compile(r"^(?:(?:Would port|Ported) .+|.+:\d+:\d+ [A-Z]+\d+ .+|.+: error: .+)$")


def test_the_precommit_hooks_are_quiet(tree):
    make_tree(tree, {"loader.py": "import torch\nfrom torch.utils.data import DataLoader\n"
                                  "loader = DataLoader([1, 2], num_workers=2, collate_fn=lambda b: b)\n"})
    subprocess.run(["git", "init", "-q"], cwd=tree, check=True)
    for hook, entry in ((name, item["entry"]) for name, item in _hook_entries().items()):
        assert entry[:2] == ["porter", "migrate"] and "-q" in entry, (hook, entry)
        proc = porter(*entry[1:], "train.py", "loader.py", cwd=tree)
        err = proc.stderr.decode()
        assert err and all(FINDING_OR_FILE.match(line) for line in err.splitlines()), (hook, err)
        assert "┃" not in err and "ledger:" not in err and "porter_runtime at" not in err


def test_quiet_prints_only_the_lines_per_file_and_per_finding(tree):
    make_tree(tree, {"smi.py": "import subprocess\nsubprocess.run(['nvidia-smi'])\n"})
    for mode in ("--check", "--write"):
        proc = porter("migrate", ".", mode, "-q", cwd=tree)
        lines = proc.stderr.decode().splitlines()
        assert lines and all(FINDING_OR_FILE.match(line) for line in lines), lines
        assert any(line.startswith("smi.py:2:1 PT111 ") for line in lines)


def test_rules_piped_is_one_line_per_rule():
    rules = json.loads(porter("rules", "--json").stdout)
    proc = porter("rules", COLUMNS="80")
    lines = proc.stdout.decode().splitlines()
    assert proc.returncode == 0 and len(lines) == len(rules)
    for line, rule in zip(lines, rules):
        assert line.split()[:3] == [rule["code"], rule["name"], rule["safety"]], line
        assert line.endswith(" ".join(rule["summary"].split())), line
    assert max(len(line) for line in lines) > 80  # a pipe is not wrapped at 80 columns
