"""``porter verify --run`` under launchers: the failing child's traceback, not the launcher's,
is mapped to its deepest line in the tree, and each failure gets its class (CUDA named by a
finding, CUDA NOT NAMED, a missing dependency, other).

torchrun runs for real (two processes on the CPU with Gloo), and so does ``accelerate
launch --cpu`` (one process: the child's traceback, then accelerate's own
``CalledProcessError``), and Open MPI's ``mpiexec --tag-output`` (two ranks, each line
tagged ``[1,0]<stderr>:``; both are test dependencies). A small launcher in the tree also
interleaves the ranks' lines, line by line, as a busy machine may. All through the real CLI.
"""

import shlex
import shutil
import sys
from pathlib import Path

import pytest
from porter_test_utils import run_porter
from test_verify import lines_of, port, verify, write_tree

TRAIN = '''
    import os
    import sys

    import torch
    import torch.distributed as dist


    def load_tokenizer():
        import tiktoken
        return tiktoken.get_encoding("gpt2")


    def step(rank):
        if rank == 1 and "--stream" in sys.argv:
            side = torch.cuda.CUDAGraph()
        if rank == 1 and "--raw" in sys.argv:
            torch.ones(1).cuda()  # porter: ignore
        if rank == 1 and "--tokenizer" in sys.argv:
            load_tokenizer()
        if rank == 1 and "--value" in sys.argv:
            raise ValueError("bad batch size")
        return rank


    def main():
        dist.init_process_group("gloo")
        step(dist.get_rank())
        dist.destroy_process_group()


    if __name__ == "__main__":
        main()
    '''

TORCHRUN = "python -m torch.distributed.run --nproc_per_node=2 --master_port={port} train.py"


@pytest.fixture
def tree(tmp_path):
    tree = write_tree(tmp_path / "repo", {"requirements.txt": "torch\n", "train.py": TRAIN})
    port(tree)
    return tree


def _free_port():
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_torchrun_rank_failure_is_mapped_to_its_line_and_named(tree):
    """Before: the last traceback (torchrun's ChildFailedError, all inside torch) was read,
    so the failure had no line and said "exit 1: ====...". Now rank 1's own traceback."""
    source = (tree / "train.py").read_text()
    line = lines_of(source, "torch.cuda.CUDAGraph()")
    code, data, _ = verify(tree, "--run", TORCHRUN.format(port=_free_port()) + " --stream")
    run = data["run"]
    assert code == 1 and run["status"] == "failed" and run["rank"] == 1
    assert run["location"] == {"path": "train.py", "line": line}
    assert run["error"] == "exit 1: rank 1: RuntimeError: Tried to instantiate dummy base class CUDAGraph"
    assert run["mapping"]["cause"] == "cuda" and run["mapping"]["named"]
    assert run["mapping"]["text"] == f"named by finding PT999 at train.py:{line}"

    text = run_porter("verify", tree, "-j", "1", "--run", TORCHRUN.format(port=_free_port()) + " --raw")
    out = text.stdout.decode()
    raw = lines_of(source, "torch.ones(1).cuda()")
    assert text.returncode == 1
    assert "exit 1: rank 1: AssertionError: Torch not compiled with CUDA enabled" in out
    assert f"at train.py:{raw}" in out
    assert f"→ CUDA: NOT NAMED by porter: silenced by `# porter: ignore` at train.py:{raw}" in out


@pytest.mark.slow
def test_torchrun_missing_module_is_a_missing_dependency(tree):
    """Found on real repositories: a missing tiktoken was "NOT NAMED by porter (a porter bug)"."""
    code, data, _ = verify(tree, "--run", TORCHRUN.format(port=_free_port()) + " --tokenizer")
    run = data["run"]
    assert code == 1 and run["rank"] == 1
    assert run["location"] == {"path": "train.py", "line": lines_of((tree / "train.py").read_text(), "import tiktoken")}
    assert run["missing_modules"] == ["tiktoken"]
    assert run["mapping"]["cause"] == "missing-dependency" and run["mapping"]["missing_dependency"] == "tiktoken"
    assert "porter bug" not in run["mapping"]["text"]


LAUNCHERS = {
    # accelerate launch (one process): runs the script, then raises its own error
    "launch_one.py": '''
        import subprocess
        import sys

        subprocess.run([sys.executable, *sys.argv[1:]], check=True)
        ''',
    # mpiexec --tag-output: each rank's lines tagged, read line by line and interleaved
    "launch_mpi.py": '''
        import subprocess
        import sys

        procs = [subprocess.Popen([sys.executable, *sys.argv[1:]], env={**__import__("os").environ, "RANK": str(r)},
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for r in range(2)]
        outputs = [p.communicate()[0].splitlines() for p in procs]
        for pair in zip(*[o + [""] * (max(map(len, outputs)) - len(o)) for o in outputs]):
            for rank, line in enumerate(pair):
                if line:
                    print(f"[1,{rank}]<stderr>:{line}")
        print("mpiexec detected that one or more processes exited with non-zero status")
        sys.exit(max(p.returncode for p in procs))
        ''',
    "job.py": '''
        import os
        import sys

        import torch


        def work(rank):
            if rank == 1 and "--value" in sys.argv:
                raise ValueError("bad batch size")
            if rank == 1:
                torch.zeros(2).cuda()  # porter: ignore


        if __name__ == "__main__":
            work(int(os.environ.get("RANK", "1")))
        ''',
}


def test_a_launchers_own_traceback_is_passed_over(tmp_path):
    tree = write_tree(tmp_path / "repo", LAUNCHERS)
    job = (tree / "job.py").read_text()
    code, data, _ = verify(tree, "--run", "python launch_one.py job.py --value")
    run = data["run"]
    assert code == 1 and run["rank"] is None
    assert run["location"] == {"path": "job.py", "line": lines_of(job, 'raise ValueError("bad batch size")')}
    assert run["error"] == "exit 1: ValueError: bad batch size"
    assert run["mapping"]["cause"] == "other" and not run["mapping"]["named"]


@pytest.mark.slow
def test_accelerate_launch_failures_are_mapped_to_the_script(tmp_path):
    """The real ``accelerate launch`` (a test dependency): its traceback, all inside
    accelerate, ends the output; the script's is the one mapped."""
    tree = write_tree(tmp_path / "repo", LAUNCHERS)
    job = (tree / "job.py").read_text()
    launch = f"{shlex.quote(sys.executable)} -m accelerate.commands.launch --cpu --num_processes 1 " \
             "--num_machines 1 --mixed_precision no --dynamo_backend no job.py"
    code, data, _ = verify(tree, "--run", launch + " --value")
    run = data["run"]
    assert code == 1
    assert run["location"] == {"path": "job.py", "line": lines_of(job, 'raise ValueError("bad batch size")')}
    assert run["error"] == "exit 1: ValueError: bad batch size"
    assert run["mapping"]["cause"] == "other"
    code, data, _ = verify(tree, "--run", launch)
    run = data["run"]
    assert code == 1 and run["location"] == {"path": "job.py", "line": lines_of(job, "torch.zeros(2).cuda()")}
    assert run["mapping"]["cause"] == "cuda" and not run["mapping"]["named"]


@pytest.mark.slow
def test_a_real_mpiexec_rank_failure_is_read_from_its_tagged_lines(tmp_path, monkeypatch):
    mpiexec = shutil.which("mpiexec", path=str(Path(sys.executable).parent))
    assert mpiexec, "Open MPI (the openmpi test dependency) is not installed beside this Python"
    monkeypatch.setenv("OMPI_ALLOW_RUN_AS_ROOT", "1")
    monkeypatch.setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
    tree = write_tree(tmp_path / "repo", {"job.py": '''
        import os

        import torch

        rank = int(os.environ["OMPI_COMM_WORLD_RANK"])
        print("rank", rank, "ready", flush=True)
        if rank == 1:
            torch.zeros(2).cuda()  # porter: ignore
        '''})
    job = (tree / "job.py").read_text()
    command = f"{shlex.quote(mpiexec)} --oversubscribe --tag-output -n 2 {shlex.quote(sys.executable)} job.py"
    code, data, _ = verify(tree, "--run", command)
    run = data["run"]
    assert code == 1 and run["rank"] == 1
    assert run["location"] == {"path": "job.py", "line": lines_of(job, "torch.zeros(2).cuda()")}
    assert run["error"] == "exit 1: rank 1: AssertionError: Torch not compiled with CUDA enabled"
    assert run["mapping"]["cause"] == "cuda" and run["mapping"]["silenced_at"] is not None


def test_interleaved_mpi_ranks_are_read_apart(tmp_path):
    tree = write_tree(tmp_path / "repo", LAUNCHERS)
    job = (tree / "job.py").read_text()
    text = run_porter("verify", tree, "-j", "1", "--run", "python launch_mpi.py job.py")
    out = text.stdout.decode()
    assert text.returncode == 1
    assert "exit 1: rank 1: AssertionError: Torch not compiled with CUDA enabled" in out
    assert f"at job.py:{lines_of(job, 'torch.zeros(2).cuda()')}" in out
    assert "→ CUDA: NOT NAMED by porter: silenced by `# porter: ignore` at job.py:" in out


def test_classes_in_the_summary_line(tmp_path):
    tree = write_tree(tmp_path / "repo", {
        "a.py": "import torch\n\nS = torch.cuda.CUDAGraph()\n",
        "b.py": "import lab_metrics_toolkit\n",
        "c.py": "raise ValueError('config file missing')\n",
        "d.py": "import torch\n\nONE = torch.zeros(1).cuda()  # porter: ignore\n",
    })
    code, data, _ = verify(tree)
    assert code == 1
    causes = {m["path"]: m["mapping"]["cause"] for m in data["modules"]}
    assert causes == {"a.py": "cuda", "b.py": "missing-dependency", "c.py": "other", "d.py": "cuda"}
    s = data["summary"]
    assert (s["named"], s["not_named"], s["missing_dependency"], s["other"]) == (1, 1, 1, 1)
    out = run_porter("verify", tree, "-j", "1").stdout.decode()
    assert ("4 modules: 0 ok, 4 failed, 0 timed out; CUDA: 1 named by porter's report, 1 NOT NAMED; "
            "1 missing a dependency; 1 other") in out
    assert "→ other: no sign of CUDA in it (NOT NAMED by porter) (a porter bug only if the cause is CUDA)" in out


# -- the import stage runs a script's imports, not its program ----------------------------

def test_a_scripts_top_level_is_not_run_by_the_import_stage(tmp_path):
    """nanoGPT's train.py trains at its top level; importing it ran the training (or timed
    out). A script (not imported by the tree, no __main__ block, work at its top level)
    has its imports checked, and nothing else runs."""
    tree = write_tree(tmp_path / "repo", {
        "model.py": "import torch\n\nWIDTH = 4\n",
        "train.py": '''
            import os
            import sys
            sys.path.insert(0, os.path.dirname(__file__))

            import torch

            from model import WIDTH

            batch_size = 8
            open("TRAINED", "w").close()
            for step in range(3):
                torch.zeros(WIDTH).cuda()
            ''',
        "sample.py": '''
            import torch
            import tiktoken

            print(tiktoken.get_encoding("gpt2"))
            ''',
        "configurator.py": "import sys\n\nfor arg in sys.argv[1:]:\n    exec(open(arg).read())\n",
    })
    code, data, _ = verify(tree)
    assert code == 1  # sample.py lacks tiktoken
    mods = {m["path"]: m for m in data["modules"]}
    assert not (tree / "TRAINED").exists()
    assert {p: (m["status"], m["imports_only"]) for p, m in mods.items()} == {
        "configurator.py": ("ok", True), "model.py": ("ok", False), "sample.py": ("failed", True),
        "train.py": ("ok", True)}
    assert mods["sample.py"]["location"] == {"path": "sample.py", "line": 2}
    assert mods["sample.py"]["mapping"]["cause"] == "missing-dependency"
    out = run_porter("verify", tree, "-j", "1").stdout.decode()
    assert "train.py         0.0 s  (a script: its imports only)" in out or "(a script: its imports only)" in out



def test_a_module_that_starts_a_program_at_import_is_not_imported_whole(tmp_path):
    """GroundingDINO's demo/gradio_app.py runs `os.system("python setup.py build develop")`
    and two `pip install`s at its top level, above its __main__ block: importing it whole
    built the package and downgraded packaging in the environment being verified. Its
    imports are checked; its commands never run."""
    tree = write_tree(tmp_path / "repo", {"demo/gradio_app.py": '''
        import os
        import subprocess
        import sys

        import torch

        os.system("touch BUILT")
        subprocess.run([sys.executable, "-c", "open('INSTALLED', 'w').close()"])


        def run_grounding(image):
            return torch.zeros(1).cuda()


        if __name__ == "__main__":
            run_grounding(None)
        '''})
    code, data, _ = verify(tree)
    assert code == 0, data
    [module] = data["modules"]
    assert (module["status"], module["imports_only"]) == ("ok", True)
    assert not (tree / "BUILT").exists() and not (tree / "INSTALLED").exists()
    assert not (tree / "demo" / "BUILT").exists() and not (tree / "demo" / "INSTALLED").exists()

# -- the reader alone, on what launchers print ---------------------------------------------

def test_the_root_cause_rank_and_a_record_traceback_are_preferred():
    """Two ranks fail; torchrun's table names rank 1 as the first failure, and with @record
    it carries that rank's traceback in its ``traceback :`` field."""
    from porter.verify.tracebacks import find_failure

    text = "\n".join([
        "[rank0]: Traceback (most recent call last):",
        '[rank0]:   File "/repo/train.py", line 30, in <module>',
        "[rank0]: RuntimeError: Connection closed by peer",
        "Traceback (most recent call last):",
        '  File "/venv/torch/distributed/run.py", line 9, in main',
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
        "=" * 60,
        "Root Cause (first observed failure):",
        "[0]:",
        "  rank      : 1 (local_rank: 1)",
        "  exitcode  : 1 (pid: 42)",
        "  error_file: /tmp/torchelastic_x/error.json",
        "  traceback : Traceback (most recent call last):",
        '    File "/repo/model.py", line 12, in forward',
        "      x = x.cuda()",
        "  AssertionError: Torch not compiled with CUDA enabled",
        "=" * 60,
    ])
    failure = find_failure(text, lambda frames: [f for f in frames if f[0].startswith("/repo/")])
    assert (failure.root.rank, failure.root.exitcode, failure.root.error_file) == (1, 1, "/tmp/torchelastic_x/error.json")
    assert failure.traceback.rank == 1 and failure.traceback.frames == [("/repo/model.py", 12)]
    assert failure.traceback.exception == "AssertionError: Torch not compiled with CUDA enabled"


def test_a_scripts_setup_call_that_reads_its_settings_is_not_run(tmp_path):
    """Found on nanoGPT: `torch.manual_seed(1337 + seed_offset)` after the skipped top
    level assigned seed_offset ran with the header and failed with a NameError."""
    tree = write_tree(tmp_path / "repo", {"bench.py": '''
        import torch

        seed = 1337
        torch.manual_seed(seed)
        for _ in range(2):
            print(torch.zeros(1))
        '''})
    code, data, _ = verify(tree)
    assert code == 0 and data["modules"][0]["imports_only"] is True


def test_an_open_mpi_rank_s_stdout_line_inside_its_traceback_is_not_the_error():
    """Open MPI forwards a rank's stdout and stderr apart: ``print("rank 1 ready")``,
    written before the failure, can arrive between the lines of its traceback (CI saw the
    real mpiexec do it). The error is the traceback's own last line."""
    from porter.verify.tracebacks import find_failure

    text = "\n".join([
        "[1,0]<stdout>:rank 0 ready",
        "[1,1]<stderr>:Traceback (most recent call last):",
        '[1,1]<stderr>:  File "/repo/job.py", line 8, in <module>',
        "[1,1]<stdout>:rank 1 ready",
        "[1,1]<stderr>:    torch.zeros(2).cuda()  # porter: ignore",
        "[1,1]<stderr>:AssertionError: Torch not compiled with CUDA enabled",
    ])
    failure = find_failure(text, lambda frames: [f for f in frames if f[0].startswith("/repo/")])
    assert failure.traceback.rank == 1 and failure.traceback.frames == [("/repo/job.py", 8)]
    assert failure.traceback.exception == "AssertionError: Torch not compiled with CUDA enabled"
