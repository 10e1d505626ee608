"""``porter fit`` on a real training script, ported by porter and run with real torch on the CPU.

fixtures/fit/train.py is CUDA code; the module fixture ports it (`porter migrate
--write`), and every run goes through tests/without_porter.py, so the peak memory
comes from the runtime porter vendored into the copy. On the CPU the measure is the
process's peak RSS, which includes ~300 MiB of Python and torch: budgets here are a
baseline plus N samples, both measured in this session by running the script at two
batch sizes (never hard-coded byte counts).

On Linux porter fit fixes glibc's MALLOC_MMAP_THRESHOLD_ for its runs (and in the
command it recommends), so that RSS follows live memory; the probes and the checks
here run with the same setting (ALLOCATOR).
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from porter.project.vendoring.runtime_modules import supply
from click.testing import CliRunner

from porter.cli.app import cli
from porter.fit.command import GLIBC_ALLOCATOR, _allocator_env

from porter.fit.params import ParamError, apply, command_line, locate, processes
from porter.fit.search import FITS, OVER, Budget, Space, Trial, search
from porter_test_utils import FIXTURES, WITHOUT_PORTER, run_porter

ENV = {**{k: v for k, v in os.environ.items() if not k.startswith(("PORTER_", "MALLOC_"))},
       "PORTER_QUIET": "1", "NO_COLOR": "1"}
ALLOCATOR = _allocator_env(ENV, sys.platform)  # what porter fit adds to its runs here
SCRIPT = [sys.executable, str(WITHOUT_PORTER), "train.py"]


@pytest.fixture(scope="module")
def repo(tmp_path_factory) -> Path:
    """The fixture repository, ported with the runtime vendored into it."""
    root = tmp_path_factory.mktemp("fit") / "repo"
    shutil.copytree(FIXTURES / "fit", root)
    proc = run_porter("migrate", root, "--write", "-q")
    assert proc.returncode == 0, proc.stderr.decode()
    assert not (root / "porter_runtime" / "tools" / "peak.py").exists()  # porter fit supplies the recorder
    assert "porter_runtime.device()" in (root / "train.py").read_text()
    return root


def start(repo: Path, *args: str, record: Path, env=ALLOCATOR) -> subprocess.Popen:
    env = {**ENV, **env, "PORTER_PEAK_MEMORY_FILE": str(record),
           **supply(repo.parent / "runtime_extra", "fit")}  # as porter fit hands it to the child
    return subprocess.Popen([*SCRIPT, *args], cwd=repo, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def measure(repo: Path, *args: str, env) -> dict:
    """Run the ported script once, as porter fit would, and read what the runtime recorded."""
    record = repo.parent / "record.jsonl"
    record.unlink(missing_ok=True)
    _, err = start(repo, *args, record=record, env=env).communicate()
    assert err.strip() == "" or "Traceback" not in err, err
    (line,) = record.read_text().splitlines()
    return json.loads(line)


@pytest.fixture(scope="module")
def per_sample(repo) -> tuple[int, int]:
    """(baseline bytes, bytes per sample) of the script, from runs at batch 2 and 6 (run side by side)."""
    records = [repo.parent / f"probe{b}.jsonl" for b in (2, 6)]
    procs = [start(repo, f"--batch_size={b}", "--max_iters=1", record=r) for b, r in zip((2, 6), records)]
    for proc in procs:
        assert proc.wait() == 0, proc.stderr.read()
    p2, p6 = (json.loads(r.read_text())["peak_bytes"] for r in records)
    slope = (p6 - p2) // 4
    assert slope > 8 << 20, (p2, p6)  # ~12 MiB a sample: far above the RSS noise
    return p2 - 2 * slope, slope


@pytest.fixture(scope="module")
def budget(per_sample) -> int:
    """Room for 2.5 samples above the baseline: 2 fit, 3 do not."""
    base, slope = per_sample
    return base + slope * 5 // 2


def fit(repo: Path, *options: str, args=(), env=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "porter", "fit", *options, "--", *SCRIPT, *args],
                          cwd=repo, env={**ENV, **(env or {})}, capture_output=True, text=True)


# -- the real CLI on the ported script ------------------------------------------------------


def test_recommended_value_fits_and_the_next_does_not(repo, budget):
    proc = fit(repo, "--budget", str(budget), "--format", "json", args=["--batch_size=8"])
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    values = [t["value"] for t in data["trials"]]
    assert values[:3] == [8, 4, 2], values  # down by halves until one fits
    best = data["recommended"]
    assert best in (2, 3) and values[3:] == [3], values  # then bisection between 2 and 4
    assert data["param"] == "batch_size" and data["style"] == "flag" and data["original"] == 8
    assert data["budget_bytes"] == budget and data["device"] == "cpu"
    for trial in data["trials"]:
        assert trial["fits"] == (trial["peak_bytes"] <= budget), trial
        assert trial["seconds"] > 0 and set(trial) >= {"value", "peak_bytes", "fits", "seconds"}
    assert max(t["value"] for t in data["trials"] if t["fits"]) == best
    assert data["command"] == [*SCRIPT, f"--batch_size={best}"]
    assert data["global_batch"] == best and data["keeps_global_batch"] is False
    assert data["env"] == ALLOCATOR
    # Both checked by running them again, outside porter fit, in the environment it recommends.
    assert measure(repo, f"--batch_size={best}", env=data["env"])["peak_bytes"] <= budget
    assert measure(repo, f"--batch_size={best + 1}", env=data["env"])["peak_bytes"] > budget


def test_flag_with_separate_value_and_the_text_output(repo, budget):
    proc = fit(repo, "--budget", str(budget), "--multiple-of", "2", args=["--batch-size", "4", "--max_iters=1"])
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == command_line([*SCRIPT, "--batch-size", "2", "--max_iters=1"], ALLOCATOR) + "\n"
    err = proc.stderr
    assert "runs your command" in err and "peak memory" in err and "no: over budget" in err
    assert "global batch changes from 4 to 2" in err and "--accum" in err


def test_hydra_override_and_an_allocator_failure(repo):
    """key=value overrides; a run that runs out of memory does not fit and the search goes on."""
    proc = fit(repo, "--format", "json", "--multiple-of", "2",
               args=["batch_size=4", "oom_above=2", "max_iters=1"])
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["style"] == "override"
    assert [(t["value"], t["status"]) for t in data["trials"]] == [(4, "out of memory"), (2, FITS)]
    assert "can't allocate memory" in data["trials"][0]["error"]
    assert data["budget_bytes"] == int(data["capacity_bytes"] * 0.8)  # the default: 80% of available RAM
    assert data["recommended"] == 2 and data["command"][-3:] == ["batch_size=2", "oom_above=2", "max_iters=1"]


def test_environment_variable(repo, budget):
    proc = fit(repo, "--param", "BATCH_SIZE", "--budget", str(budget), "--format", "json", "--multiple-of", "2",
               args=["--max_iters=1"], env={"BATCH_SIZE": "4"})
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["style"] == "env" and data["original"] == 4
    assert [(t["value"], t["fits"]) for t in data["trials"]] == [(4, False), (2, True)]
    assert data["env"] == {**ALLOCATOR, "BATCH_SIZE": "2"} and "BATCH_SIZE=2 " in data["command_line"]


def test_accumulation_keeps_the_global_batch(repo, budget):
    proc = fit(repo, "--accum", "grad_accum", "--budget", str(budget), "--format", "json",
               args=["--batch_size=4", "--grad_accum=2", "--max_iters=1"])
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert [(t["value"], t["accum"], t["fits"]) for t in data["trials"]] == [(4, 2, False), (2, 4, True)]
    assert (data["recommended"], data["recommended_accum"]) == (2, 4)
    assert data["global_batch"] == data["original_global_batch"] == 8 and data["keeps_global_batch"]
    run = subprocess.run(data["command"], cwd=repo, env={**ENV, **data["env"]}, capture_output=True, text=True)
    assert run.returncode == 0 and "global batch 8 = 2 x 4" in run.stdout, run.stderr


def test_a_crash_that_is_not_memory_stops_the_search(repo, budget):
    proc = fit(repo, "--budget", str(budget), args=["--batch_size=4", "crash_below=3", "max_iters=1"])
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == ""
    err = proc.stderr
    assert "batch_size=2 failed (exit status 1), not for lack of memory" in err
    assert "ValueError: batch_size=2 is below the 3 samples BatchNorm statistics need" in err
    assert "trying batch_size=4" in err and "trying batch_size=1" not in err and "trying batch_size=3" not in err


def test_nothing_fits_exits_1(repo):
    proc = fit(repo, "--budget", "1MiB", "--format", "json", args=["--batch_size=1", "--max_iters=1"])
    assert proc.returncode == 1, proc.stderr
    data = json.loads(proc.stdout)
    assert data["recommended"] is None and data["command_line"] is None
    assert [(t["value"], t["status"]) for t in data["trials"]] == [(1, OVER)]


def test_a_command_without_the_runtime_is_refused(repo):
    proc = subprocess.run([sys.executable, "-m", "porter", "fit", "--format", "json", "--",
                           sys.executable, "-c", "print('trained')", "--batch_size=8"],
                          cwd=repo, env=ENV, capture_output=True, text=True)
    assert proc.returncode == 2
    data = json.loads(proc.stdout)
    assert data["recommended"] is None and len(data["trials"]) == 1
    assert "must import porter_runtime" in data["trials"][0]["error"]


@pytest.mark.parametrize("options,args,message", [
    ([], ["--max_iters=1"], "does not set batch_size"),
    ([], ["--batch_size=auto"], "porter fit needs a whole number"),
    (["--accum", "grad_accum"], ["--batch_size=8"], "does not set grad_accum"),
    (["--budget", "lots"], ["--batch_size=8"], "use bytes or a size like 6GiB"),
])
def test_bad_input_exits_2_before_running_anything(options, args, message):
    result = CliRunner().invoke(cli, ["fit", *options, "--", sys.executable, "-c", "raise SystemExit(99)", *args])
    assert result.exit_code == 2 and message in result.output


def test_help_says_it_runs_the_code():
    out = CliRunner().invoke(cli, ["fit", "--help"]).output
    assert "This runs COMMAND, your code" in out and "migrate never runs it" in out and "Exit codes" in out


# -- the parts, on their own ---------------------------------------------------------------


def test_locate_each_way_of_passing_a_value():
    argv = ["python", "train.py", "--batch_size", "64", "--lr=3e-4"]
    param = locate(argv, "batch_size")
    assert (param.style, param.original, param.spelling) == ("flag", 64, "--batch_size")
    assert apply(argv, {}, {param: 8})[0] == ["python", "train.py", "--batch_size", "8", "--lr=3e-4"]
    assert locate(["t.py", "--batch-size=32"], "batch_size").original == 32
    assert locate(["t.py", "--bs=32"], "--bs").original == 32
    hydra = locate(["t.py", "+data.batch_size=16"], "data.batch_size")
    assert hydra.style == "override" and apply(["t.py", "+data.batch_size=16"], {}, {hydra: 4})[0][-1] == \
        "+data.batch_size=4"
    env = locate(["t.py"], "BS", environ={"BS": "12"})
    assert env.style == "env" and apply(["t.py"], {"X": "1"}, {env: 3}) == (["t.py"], {"X": "1", "BS": "3"})
    assert command_line(["t.py", "a b"], {"BS": "3"}) == "BS=3 t.py 'a b'"
    with pytest.raises(ParamError, match="does not set"):
        locate(["t.py", "--batch_size=8"], "batch_size", style="env", environ={})
    assert processes(["torchrun", "--nproc_per_node=4", "train.py"]) == 4
    assert processes(["accelerate", "launch", "--num_processes", "2", "t.py"]) == 2
    assert processes(["python", "t.py"]) == 1


def test_glibc_allocator_setting_only_on_linux_and_never_over_the_user():
    assert _allocator_env({}, "linux") == GLIBC_ALLOCATOR
    assert _allocator_env({"MALLOC_MMAP_THRESHOLD_": "0"}, "linux") == {}
    assert _allocator_env({}, "darwin") == {}


@pytest.mark.parametrize("text,expected", [
    ("6GiB", Budget(bytes=6 << 30)), ("6G", Budget(bytes=6 << 30)), ("6GB", Budget(bytes=6 * 10**9)),
    ("512M", Budget(bytes=512 << 20)), ("1000", Budget(bytes=1000)), ("1.5 GiB", Budget(bytes=3 << 29)),
    ("70%", Budget(fraction=0.7)),
])
def test_budget_sizes(text, expected):
    assert Budget.parse(text) == expected


def _fake(limit: int):
    """A run whose peak is its value: fits at most ``limit`` (the search logic alone)."""
    def trial(value, accum):
        return Trial(value, accum, FITS if value <= limit else OVER, peak_bytes=value)
    return trial


@pytest.mark.parametrize("original,limit,order", [
    (768, 100, [768, 384, 192, 96, 144, 120, 108, 102, 99, 101, 100]),
    (16, 16, [16]),  # the original fits: nothing to search
    (16, 0, [16, 8, 4, 2, 1]),  # nothing fits
])
def test_search_order(original, limit, order):
    outcome = search(Space(original), _fake(limit))
    assert [t.value for t in outcome.trials] == order
    assert (outcome.best.value if outcome.best else 0) == limit


def test_search_with_accumulation_tries_only_divisors_of_the_global_batch():
    outcome = search(Space(96, global_batch=96 * 1), _fake(40))  # divisors of 96: ..., 24, 32, 48, 96
    assert [(t.value, t.accum) for t in outcome.trials] == [(96, 1), (48, 2), (24, 4), (32, 3)]
    assert outcome.best.value == 32
    # A micro-batch that fits may grow past the original, shrinking the accumulation.
    grown = search(Space(4, global_batch=32), _fake(32))
    assert [(t.value, t.accum) for t in grown.trials] == [(4, 8), (16, 2), (32, 1)]


def test_search_stops_at_the_trial_limit_with_the_best_so_far():
    outcome = search(Space(768), _fake(100), max_trials=5)
    assert len(outcome.trials) == 5 and outcome.best.value == 96 and "max-trials 5" in outcome.stopped


def test_the_docs_document_every_option():
    from porter.fit.command import fit as command
    from porter_test_utils import ROOT

    section = (ROOT / "docs" / "commands.md").read_text().split("## Fit the batch size")[1].split("\n## ")[0]
    for option in command.params:
        for name in option.opts:
            if name.startswith("--") and name != "--help":
                assert f"`{name}" in section, name
