"""What the clean-up after the rules removes: availability probes the port left dead
(porter.edits.probes), and never an import line the user marked ``# porter: ignore``."""

import functools
import json
from pathlib import Path
from textwrap import dedent

from porter.engine.process import Options, migrate_source
from porter.engine.stages.notebook import migrate_notebook
from porter.engine.registry import all_rules
from porter.engine.run import RunConfig, run

PROBE = dedent("""\
    \"\"\"Attention backends.\"\"\"
    import os

    try:
        import xformers.ops as xops

        XFORMERS_AVAILABLE = True
    except ImportError:
        XFORMERS_AVAILABLE = False

    BACKEND = os.environ.get("BACKEND", "sdpa")


    def attend(q, k, v):
        if not XFORMERS_AVAILABLE:
            raise ImportError("pip install xformers")
        return xops.memory_efficient_attention(q, k, v, attn_bias=xops.LowerTriangularMask())
    """)

#: As the engine alone places the runtime import (a run follows the file's import style).
PORTED = dedent("""\
    \"\"\"Attention backends.\"\"\"
    import porter_runtime
    import os

    BACKEND = os.environ.get("BACKEND", "sdpa")


    def attend(q, k, v):
        return porter_runtime.memory_efficient_attention(q, k, v, attn_bias=porter_runtime.xformers_bias.LowerTriangularMask())
    """)


def migrate(code: str, path: str = "attention.py"):
    return migrate_source(dedent(code).encode(), Options(rules=all_rules()), path=path)


def port_tree(tmp_path: Path, files: dict[str, str], jobs: int = 1) -> dict[str, str]:
    """Every file of the tree after a run (the tree facts as the CLI gathers them)."""
    for rel, code in files.items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(dedent(code))
    result = run(RunConfig([tmp_path], tmp_path, Options(rules=all_rules()), jobs=jobs))
    assert not result.errors, [f.error for f in result.errors]
    return {f.path: (f.new if f.new is not None else (tmp_path / f.path).read_bytes()).decode() for f in result.files}


def probe_kept(text: str) -> bool:
    return "    import xformers.ops as xops" in text and "XFORMERS_AVAILABLE = False" in text


# -- dead probes --------------------------------------------------------------------

def test_a_probe_whose_names_the_port_left_unused_goes_and_is_reported():
    result = migrate(PROBE)
    assert result.new.decode() == PORTED  # one blank line before BACKEND, as before
    removal = [f for f in result.findings if f.line == 4]
    assert [(f.code, f.action) for f in removal] == [("TP201", "rewrite")]
    assert "XFORMERS_AVAILABLE" in removal[0].message and "xformers.ops" in removal[0].message
    assert migrate(PORTED).new.decode() == PORTED  # a second run changes nothing


def test_a_probe_whose_flag_the_file_still_reads_stays():
    code = PROBE + "\n\ndef backend():\n    return \"xformers\" if XFORMERS_AVAILABLE else \"sdpa\"\n"
    new = migrate(code).new.decode()
    assert probe_kept(new) and "porter_runtime.memory_efficient_attention(" in new


def test_a_probe_whose_import_the_file_still_uses_stays():
    code = PROBE + "\n\nmlp = xops.SwiGLU(8, 16)\n"  # no twin for SwiGLU: TP203 reports it
    result = migrate(code)
    assert probe_kept(result.new.decode())
    assert any(f.code == "TP203" for f in result.findings)


def test_a_probe_the_file_did_not_use_before_the_port_stays():
    code = PROBE.split("\n\n\ndef ")[0] + "\n\n\ndef to_gpu(x):\n    return x.cuda()\n"  # no use of xops
    new = migrate(code).new.decode()
    assert probe_kept(new) and "x.to(porter_runtime.device())" in new


def test_a_probe_marked_porter_ignore_stays():
    code = PROBE.replace("    import xformers.ops as xops\n", "    import xformers.ops as xops  # porter: ignore\n")
    assert probe_kept(migrate(code).new.decode())


def test_the_comment_right_above_a_probe_goes_with_it_a_set_apart_one_stays():
    code = """\
        import torch

        # ---- attention ----

        # optional fast path
        try:
            from flash_attn import flash_attn_func
            HAS_FLASH = True
        except ModuleNotFoundError:
            HAS_FLASH = False


        def attend(q, k, v):
            assert HAS_FLASH
            return flash_attn_func(q, k, v, causal=True)
        """
    assert migrate(code).new.decode() == ("import porter_runtime\nimport torch\n\n# ---- attention ----\n\n\n"
                                          "def attend(q, k, v):\n"
                                          "    return porter_runtime.attention(q, k, v, causal=True)\n")


def test_a_probe_another_module_of_the_tree_reads_stays(tmp_path):
    tree = {"ops/__init__.py": "", "ops/attention.py": PROBE,
            "train.py": "from ops.attention import XFORMERS_AVAILABLE\nprint(XFORMERS_AVAILABLE)\n"}
    assert probe_kept(port_tree(tmp_path, tree, jobs=2)["ops/attention.py"])  # the tree facts reach the workers


def test_a_probe_is_kept_for_a_star_import_or_a_reexported_name(tmp_path):
    star = {"ops/__init__.py": "from .attention import *\n", "ops/attention.py": PROBE}
    assert probe_kept(port_tree(tmp_path / "star", star)["ops/attention.py"])
    alias = {"ops/__init__.py": "", "ops/attention.py": PROBE, "model.py": "from ops.attention import xops\n"}
    assert probe_kept(port_tree(tmp_path / "alias", alias)["ops/attention.py"])


def test_a_probe_goes_when_no_other_module_reads_its_names(tmp_path):
    tree = {"ops/__init__.py": "", "ops/attention.py": PROBE,
            # its own xformers import: the word xops, but not from ops.attention
            "bench.py": "import xformers.ops as xops\n\nprint(xops.__name__)\n"}
    new = port_tree(tmp_path, tree)["ops/attention.py"]
    assert "try:" not in new and "XFORMERS_AVAILABLE" not in new
    assert "import os\n\nimport porter_runtime\n\nBACKEND = " in new  # the run's import style, one blank line


def test_a_notebook_cell_probe_stays_a_later_cell_may_read_it():
    cells = [PROBE, "print(XFORMERS_AVAILABLE)\n"]
    notebook = {"cells": [{"cell_type": "code", "metadata": {}, "source": c, "outputs": [], "execution_count": None}
                          for c in cells], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    new, _ = migrate_notebook(json.dumps(notebook).encode(), Options(rules=all_rules()), path="nb.ipynb")
    first = json.loads(new)["cells"][0]["source"]
    first = "".join(first) if isinstance(first, list) else first
    assert probe_kept(first) and "porter_runtime.memory_efficient_attention(" in first


def _notebook(*cells: str) -> bytes:
    return json.dumps({"cells": [{"cell_type": "code", "metadata": {}, "source": c, "outputs": [],
                                  "execution_count": None} for c in cells],
                       "metadata": {}, "nbformat": 4, "nbformat_minor": 5}).encode()


def _cells(data: bytes) -> list[str]:
    return ["".join(c["source"]) if isinstance(c["source"], list) else c["source"]
            for c in json.loads(data)["cells"]]


def test_a_notebook_import_a_later_cell_reads_stays_when_its_cell_loses_the_last_use():
    """whisper's LibriSpeech notebook: cell 4 imports torch for its one device line,
    later cells call torch.no_grad(); the port must not leave them a NameError."""
    setup = "import sys\nimport torch\n\nDEVICE = 'cuda' if torch.cuda.is_available() else 'cpu'\n"
    later = "with torch.no_grad():\n    out = model(x.to(DEVICE))\nprint(out, file=sys.stderr)\n"
    new, _ = migrate_notebook(_notebook(setup, later), Options(rules=all_rules()), path="nb.ipynb")
    first = _cells(new)[0]
    assert "import sys\nimport torch\n" in first and "DEVICE = porter_runtime.device_str()" in first
    # with no other cell reading it, torch goes as it does in a .py file
    alone, _ = migrate_notebook(_notebook(setup, "print(DEVICE, file=sys.stderr)\n"), Options(rules=all_rules()),
                                path="nb.ipynb")
    assert "import torch" not in _cells(alone)[0] and "import sys\n" in _cells(alone)[0]


# -- # porter: ignore on an import line ---------------------------------------------

def test_an_import_marked_porter_ignore_stays_when_a_rewrite_takes_its_last_use():
    code = "import torch\nimport torch.distributed as dist  # porter: ignore[PT999]\ndist.init_process_group('nccl')\n"
    result = migrate(code, "dist_setup.py")
    assert result.new.decode() == ("import porter_runtime\nimport torch\n"
                                   "import torch.distributed as dist  # porter: ignore[PT999]\n"
                                   "porter_runtime.init_process_group('nccl')\n")


def test_an_import_list_with_porter_ignore_on_one_line_is_not_edited():
    code = "import torch\nfrom torch import (\n    device,  # porter: ignore\n    ones,\n)\nx = device('cuda')\n"
    new = migrate(code, "devices.py").new.decode()
    assert "from torch import (\n    device,  # porter: ignore\n    ones,\n)\n" in new
    assert "x = porter_runtime.device()" in new
    # the same import without the comment loses the name the rewrite left unused
    plain = migrate(code.replace("  # porter: ignore", ""), "devices.py").new.decode()
    assert "from torch import (\n    ones,\n)\n" in plain


def test_a_removed_import_leaves_its_comments_where_it_was():
    """The fuzz test's find: ``import torch  # the framework`` lost its comment with the
    import. Each comment of a removed line stays, on a line of its own; one on a name
    removed from a list goes above the import. The port still runs."""
    code = "# -*- coding: utf-8 -*-\nimport torch  # the framework\n\na = torch.device(\"cuda\")\n"
    new = migrate(code, "setup_device.py").new.decode()
    assert new == ("# -*- coding: utf-8 -*-\nimport porter_runtime\n# the framework\n\n"
                   "a = porter_runtime.device()\n")
    namespace: dict = {}
    exec(compile(new, "setup_device.py", "exec"), namespace)
    assert namespace["a"].type == "cpu"
    assert migrate(new, "setup_device.py").new.decode() == new  # a second run changes nothing

    listed = ("import os\n# kernels, for GPUs\nimport flash_attn  # 2.x\nfrom flash_attn import (\n"
              "    flash_attn_func,  # fast\n    flash_attn_varlen_func,\n)\n\n"
              "out = flash_attn_func(q, k, v)\nvarlen = flash_attn_varlen_func.__name__\nv = flash_attn.__version__\n")
    new = migrate(listed, "attention.py").new.decode()
    assert "# kernels, for GPUs\nimport flash_attn  # 2.x\n" in new  # still used: untouched
    assert "# fast\nfrom flash_attn import (\n    flash_attn_varlen_func,\n)\n" in new

    last = "import torch\nx = torch.zeros(2).cuda()\nimport flash_attn  # at the end\n"
    new = migrate(last.replace("import flash_attn", "from flash_attn import flash_attn_func")
                  + "y = flash_attn_func(x, x, x)\n", "tail.py").new.decode()
    assert new.count("# at the end") == 1


def _every_source():
    """Every rule example's code, and every Python file of the fixture repositories."""
    from porter.rulebase.rule import Rule
    from porter_test_utils import FIXTURES

    for rule in all_rules():
        if issubclass(rule, Rule):
            for i, example in enumerate(rule.invalid):
                yield f"{rule.code}-{i}", example.before.encode()
    for path in sorted((FIXTURES / "repos").rglob("*.py")):
        yield str(path.relative_to(FIXTURES)), path.read_bytes()


def _port(data: bytes, options: Options):
    """The migrated bytes, or the error's type for a fixture LibCST can't parse."""
    try:
        return migrate_source(data, options).new
    except Exception as exc:
        return type(exc)


@functools.lru_cache(maxsize=1)
def _ported_every_source():
    """Every source of ``_every_source`` and the hand-made lists below, ported as porter
    does, with what the clean-up did on the way: (sources, outputs, each answer of the
    shortcut past the scope passes, the indexes of the sources whose port removed an
    import). Made once for the tests of this file that compare against it."""
    from porter.edits import unused_imports

    options = Options(rules=list(all_rules()))
    sources = [*_every_source(), *((f"list-{i}", code.encode()) for i, code in enumerate(LISTS))]
    answers: list = []
    removing: list[int] = []
    real_shortcut, real_remove = unused_imports._may_lose_a_use, unused_imports.remove_imports
    outputs = []
    try:
        unused_imports._may_lose_a_use = lambda ctx: answers.append(real_shortcut(ctx)) or answers[-1]
        for i, (_, data) in enumerate(sources):
            unused_imports.remove_imports = lambda *a, i=i: removing.append(i) or real_remove(*a)
            outputs.append(_port(data, options))
    finally:
        unused_imports._may_lose_a_use, unused_imports.remove_imports = real_shortcut, real_remove
    return sources, outputs, answers, sorted(set(removing))


def test_the_shortcut_past_the_scope_passes_changes_nothing(monkeypatch):
    """``unused_imports._may_lose_a_use``: where no replaced node names a top-level import,
    the clean-up skips its two full scope passes. Forcing them everywhere gives the
    same output on every rule example and fixture file, and the shortcut is taken."""
    from porter.edits import unused_imports

    sources, with_shortcut, answers, _ = _ported_every_source()
    options = Options(rules=list(all_rules()))
    monkeypatch.setattr(unused_imports, "_may_lose_a_use", lambda ctx: True)
    without = [_port(data, options) for _, data in sources]
    assert [name for (name, _), a, b in zip(sources, with_shortcut, without) if a != b] == []
    assert False in answers and True in answers


def test_a_functions_import_torch_goes_when_the_port_took_its_last_use(tmp_path):
    """FastChat's get_gpu_memory imports torch for `torch.cuda.device` alone: once PT114 made
    that porter_runtime.cuda_device, whose module imports torch, the function's `import torch`
    was left unused (a new ruff F401). A function that still uses torch keeps its import."""
    code = dedent("""\
        import json


        def get_gpu_memory(max_gpus):
            import torch

            gpu_memory = []
            for gpu_id in range(max_gpus):
                with torch.cuda.device(gpu_id):
                    gpu_memory.append(gpu_id)
            return gpu_memory


        def zeros():
            import torch

            return torch.zeros(1)


        print(json.dumps(get_gpu_memory(2)), zeros().tolist())
        """)
    new = migrate(code).new.decode()
    assert new.count("import torch\n") == 1 and "    return torch.zeros(1)" in new
    assert "with porter_runtime.cuda_device(gpu_id):" in new
    script = tmp_path / "mem.py"
    script.write_text(new)
    (tmp_path / "porter_runtime").symlink_to(Path(__import__("porter_runtime").__file__).parent)
    import subprocess
    import sys
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, cwd=tmp_path,
                          env={"CUDA_VISIBLE_DEVICES": "", "PATH": "/usr/bin:/bin", "PORTER_QUIET": "1"})
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[0, 1] [0.0]"


def test_an_import_all_exports_or_a_string_annotation_names_stays():
    """The removal's safety checks (porter.edits.import_removal): a rewrite took the
    name's last read, yet ``__all__`` re-exports it or a string annotation names it."""
    exported = migrate("import torch\nfrom torch.cuda.amp import autocast\n__all__ = ['autocast', 'run']\n\n"
                       "def run(x):\n    with autocast():\n        return x\n", "amp.py").new.decode()
    assert "from torch.cuda.amp import autocast\n" in exported and "porter_runtime.autocast()" in exported
    annotated = "import torch\nfrom torch.cuda.amp import GradScaler\n\ndef make() -> 'GradScaler':\n" \
                "    return GradScaler()\n"
    new = migrate(annotated, "amp.py").new.decode()
    assert "from torch.cuda.amp import GradScaler\n" in new and "porter_runtime.GradScaler()" in new
    plain = migrate(annotated.replace(" -> 'GradScaler'", ""), "amp.py").new.decode()
    assert "from torch.cuda.amp import GradScaler" not in plain  # nothing else names it: it goes
    namespace: dict = {}
    exec(compile(plain, "amp.py", "exec"), namespace)
    import torch

    assert isinstance(namespace["make"](), torch.amp.GradScaler)  # the port runs on the CPU


def _libcst_remover(module, scheduled, kept, in_use):
    """The oracle: LibCST's own ``RemoveImportsVisitor``, which porter used before."""
    from libcst.codemod import CodemodContext
    from libcst.codemod.visitors import RemoveImportsVisitor

    context = CodemodContext()
    for module_name, obj, asname in scheduled:
        RemoveImportsVisitor.remove_unused_import(context, module_name, obj, asname)

    class KeepIgnored(RemoveImportsVisitor):
        def leave_SimpleStatementLine(self, original, updated):
            return original if any(original.deep_equals(k) for k in kept) else updated

    return KeepIgnored(context).transform_module(module)


LISTS = [
    "import torch\nfrom torch import (\n    device,  # the device\n    ones,\n)\nx = device('cuda')\ny = ones(2)\n",
    "import torch\nfrom torch import ones, device\nx = device('cuda')\ny = ones(2)\n",
    "import torch\nfrom torch import (device,\n    ones)\nx = device('cuda')\ny = ones(2)\n",
    "import torch\nfrom torch import (\n    # first\n    device,\n    # second\n    ones,\n)\nx = device('cuda')\n",
    "import os, sys, torch\nfrom flash_attn import flash_attn_func, flash_attn_varlen_func as varlen\n"
    "if not torch.cuda.is_available():\n    sys.exit('needs a GPU')\nout = flash_attn_func(q, k, v)\nf = varlen\n",
    "import torch; from torch import device; x = device('cuda')\n",
]


def test_the_removal_edits_lines_as_libcsts_remover_does(monkeypatch):
    """porter's own import removal against LibCST's ``RemoveImportsVisitor`` as the
    oracle, on every rule example, every fixture file and hand-made import lists
    (parentheses, comments, ``as`` names, ``;`` lines): the same output, byte for byte."""
    from porter.edits import unused_imports

    sources, ours, _, removing = _ported_every_source()
    options = Options(rules=list(all_rules()))
    monkeypatch.setattr(unused_imports, "remove_imports", _libcst_remover)
    assert [sources[i][0] for i in removing if _port(sources[i][1], options) != ours[i]] == []
    assert len(removing) > 50  # the removal ran on many of them
    assert {f"list-{i}" for i in range(len(LISTS))} <= {sources[i][0] for i in removing}


def test_an_import_nested_in_a_functions_branch_goes_with_its_last_use(tmp_path):
    """ChatGLM-6B's vendored Trainer imports FSDP's ShardedGradScaler inside an `elif`
    of a method; once PT503 made the call porter_runtime.ShardedGradScaler() the import
    was left unused (a new ruff F401, blind round 9). It goes now, at any depth; an
    import that is its block's only statement becomes `pass` (llm-foundry's `try: from
    flash_attn import bert_padding, flash_attn_interface` / `except ImportError as e: raise
    e`, whose uses TP101 and TP103 ported: left, it failed off CUDA); one still used stays."""
    code = dedent("""\
        import torch


        class Trainer:
            def setup(self, fsdp):
                if fsdp:
                    from torch.distributed.fsdp.sharded_grad_scaler import (
                        ShardedGradScaler as FSDPShardedGradScaler,
                    )

                    self.scaler = FSDPShardedGradScaler()
                else:
                    self.scaler = torch.cuda.amp.GradScaler()
                return self.scaler

            def alone(self):
                if True:
                    from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler
                return ShardedGradScaler()

            def kept(self):
                from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler
                scaler = ShardedGradScaler()
                return scaler, ShardedGradScaler


        def unpad(x, indices):
            try:
                from flash_attn import bert_padding  # type: ignore # isort: skip
            except ImportError as e:
                raise e
            return bert_padding.pad_input(bert_padding.index_first_axis(x, indices), indices, 1, 4)


        print(type(Trainer().setup(True)).__name__, type(Trainer().setup(False)).__name__)
        print(unpad(torch.arange(8.0).reshape(4, 2), torch.tensor([0, 2])).tolist())
        """)
    new = migrate(code, "trainer.py").new.decode()
    assert "FSDPShardedGradScaler" not in new
    assert "            self.scaler = porter_runtime.ShardedGradScaler()\n" in new
    assert new.count("from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler\n") == 1
    assert "        if True:\n            pass\n" in new
    assert "flash_attn" not in new and "    try:\n        pass\n    except ImportError as e:\n" in new
    script = tmp_path / "trainer.py"
    script.write_text(new)
    (tmp_path / "porter_runtime").symlink_to(Path(__import__("porter_runtime").__file__).parent)
    import subprocess
    import sys
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, cwd=tmp_path,
                          env={"CUDA_VISIBLE_DEVICES": "", "PATH": "/usr/bin:/bin", "PORTER_QUIET": "1"})
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["ShardedGradScaler GradScaler", "[[[0.0, 1.0], [0.0, 0.0], [4.0, 5.0], [0.0, 0.0]]]"]


# -- imports a rewrite left idle, in a __main__ block and beside never-used names ------------

SEQUENCE_PARALLEL = dedent("""\
    import torch

    try:
        from flash_attn.flash_attn_interface import _flash_attn_forward, _flash_attn_backward
    except ImportError:
        pass


    def attend(q, k, v):
        out, lse = _flash_attn_forward(q, k, v, 0.0, q.shape[-1] ** -0.5, True, (-1, -1), None, False)[:2]
        return out


    def check(q, k, v):
        from flash_attn import flash_attn_qkvpacked_func, flash_attn_func
        return (flash_attn_func(q, k, v, causal=True) - attend(q, k, v)).abs().max()


    if __name__ == "__main__":
        if torch.cuda.is_available():
            from flash_attn.flash_attn_interface import _flash_attn_forward, _flash_attn_backward
        q = torch.randn(1, 8, 2, 16)
        print("max difference", float(check(q, q, q)))
    """)


def test_an_import_every_use_of_which_the_port_took_goes_from_a_main_block_and_a_function(tmp_path):
    """EasyContext's lightseq_async_attn.py (blind round 17): the port rewrote every call to
    flash_attn's twins but kept `from flash_attn import flash_attn_qkvpacked_func, flash_attn_func`
    (the first name never used) in a test function and the same import in the ``__main__``
    block: the second `porter migrate` found 3 new TP603 and ruff 3 new F401."""
    import subprocess
    import sys

    from porter_test_utils import run_porter

    (tmp_path / "attn.py").write_text(SEQUENCE_PARALLEL)
    first = tmp_path / "first.json"
    assert run_porter("migrate", tmp_path, "--write", "--report", first).returncode == 0
    ported = (tmp_path / "attn.py").read_text()
    assert "from flash_attn import" not in ported
    main_block = ported[ported.index('if __name__ == "__main__":'):]
    assert "flash_attn" not in main_block and "        pass\n" in main_block
    second = tmp_path / "second.json"
    assert run_porter("migrate", tmp_path, "--write", "--report", second).returncode == 0
    assert (tmp_path / "attn.py").read_text() == ported  # a fixed point
    review = [(f["code"], f["line"]) for e in json.loads(second.read_text())["files"] for f in e.get("findings", ())
              if f.get("action") == "review" and f.get("severity") != "info"]
    assert review == []  # nothing new to review after --write
    done = subprocess.run([sys.executable, "attn.py"], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and "max difference" in done.stdout, done.stderr[-2000:]
