"""The catch-all of the ledger (porter.project.touchpoints.ledger): a CUDA touchpoint nothing accounts for."""

from __future__ import annotations

from textwrap import dedent

from porter.project.touchpoints.ledger import CODE, NAME
from porter.rulebase.rule import BaseRule, Example, Safety


class CudaTouchpoint(BaseRule):
    """A CUDA touchpoint that no rule ported or named, no guard keeps off CUDA, and that is not inert.

    What:
    After the rules ran, porter's ledger walks every Python file and finds what ties
    it to CUDA, independently of the rules: imports of CUDA-only modules and imports
    that resolve to nothing in the tree, the standard library or the declared
    dependencies (often a compiled CUDA extension), `torch.cuda.*`, `.cuda()`,
    `"cuda"` / `"nccl"` strings, `cpp_extension` builds of CUDA sources, `is_cuda`,
    DDP's `device_ids` / `output_device`, and CUDA environment variables. A
    touchpoint that a rule rewrote or reported, that only runs where CUDA is present
    (under `if torch.cuda.is_available():`, `if x.is_cuda:`, after `if not
    torch.cuda.is_available(): return`, in a `try: import ...` with a real
    `except ImportError:` fallback), or that can't fail (a message, a docstring, a
    comparison, `torch.cuda.manual_seed`) is accounted for; each other one gets this
    finding, naming what was seen and why it may fail off CUDA.

    Why:
    A report that says "needs a human: 0" while the port still crashes with
    `ModuleNotFoundError: No module named 'rotary_emb'` at a line it never named
    loses the user's trust in every other line. This finding is porter saying "I saw
    this and did not handle it", so nothing CUDA-only passes in silence.

    Fix safety:
    Review only: porter found no rule that knows the construct. Port it by hand (the
    suggestion names the PyTorch path), guard it, or silence a line that is fine with
    `# porter: ignore[PT999]`.

    Known limits:
    Matching a touchpoint to a rule's finding is by position: a finding on the
    touchpoint, inside it, or on the expression or statement around it. Names are
    resolved through imports only (a device string built at run time is not seen).
    Imports resolve against the tree, the standard library, the declared
    dependencies and a list of well-known packages, never against what happens to be
    installed beside porter. Notebooks are not scanned.
    """

    code = CODE
    name = NAME
    safety = Safety.REVIEW

    valid = [
        # Only runs where CUDA is present: guarded.
        dedent("""\
        import torch

        if torch.cuda.is_available():
            torch.cuda.synchronize()
        """),
        # A real fallback: the import is guarded.
        dedent("""\
        try:
            import rotary_emb
        except ImportError:
            rotary_emb = None
        """),
        # Messages, comparisons and calls that answer without CUDA are inert.
        dedent("""\
        import torch

        def describe(x):
            print("running on cuda")
            torch.cuda.manual_seed_all(0)
            return x.device.type == "cuda"
        """),
        # The rest of a function after an early return off CUDA.
        dedent("""\
        import torch

        def stats():
            if not torch.cuda.is_available():
                return {}
            return {"peak": torch.cuda.max_memory_allocated(), "name": torch.cuda.get_device_name()}
        """),
        # A lookalike: the project's own module named cuda_utils.
        dedent("""\
        from .cuda_utils import helper
        """),
        # Tests skipped off CUDA (porter.rulebase.conditions.test_gates): they never run on a Mac.
        dedent("""\
        import unittest

        import torch
        from torch.distributed.device_mesh import init_device_mesh
        from torch.testing._internal.common_distributed import skip_if_lt_x_gpu


        @unittest.skipIf(not torch.cuda.is_available(), "Skip when CUDA is not available")
        class HSDPTest(unittest.TestCase):
            def test_mesh(self):
                mesh = init_device_mesh("cuda", (2, 2))


        class ShardTest(unittest.TestCase):
            @skip_if_lt_x_gpu(4)
            def test_shard(self):
                mesh = init_device_mesh("cuda", (4,))
        """),
        # A choice of implementation by name, compared and handed on, never a device.
        dedent("""\
        def upfirdn2d(x, f, up=1, down=1, padding=0, flip_filter=False, gain=1, impl='cuda'):
            assert impl in ['ref', 'cuda']
            if impl == 'cuda' and x.device.type == 'cuda' and _init():
                return _upfirdn2d_cuda(up=up, down=down, padding=padding, flip_filter=flip_filter, gain=gain).apply(x, f)
            return _upfirdn2d_ref(x, f, up=up, down=down, padding=padding, flip_filter=flip_filter, gain=gain)

        def filter2d(x, f, padding=0, flip_filter=False, gain=1, impl='cuda'):
            return upfirdn2d(x, f, padding=padding, flip_filter=flip_filter, gain=gain, impl=impl)
        """),
        # A unit test that mocks CUDA and the process group: its "nccl" reaches the mocks.
        dedent("""\
        import unittest
        from unittest.mock import MagicMock, patch

        from trainer.utils import setup_distribution


        class SetupDistributionTest(unittest.TestCase):
            @patch("torch.distributed.init_process_group")
            @patch("torch.cuda.is_available", return_value=True)
            def test_setup_distribution_cuda(self, mock_cuda: MagicMock, mock_init: MagicMock) -> None:
                device = setup_distribution(backend="nccl", rank=1, world_size=4, local_rank=1)
                mock_init.assert_called_once_with(backend="nccl", init_method="env://", rank=1, world_size=4)
        """),
        # NCCL exists only in CUDA builds: its arm runs only where CUDA is.
        dedent("""\
        import torch.distributed as dist

        dist.init_process_group(backend="nccl" if dist.is_nccl_available() else "gloo")
        """),
    ]
    invalid = [
        Example(  # a default that becomes a device is no mere choice of name
            dedent("""\
            import torch

            def sample(n, device='cuda'):
                if device == 'cuda':
                    torch.backends.cudnn.benchmark = True
                return torch.randn(n, device=device)
            """),
            line=3, message="'cuda'",
        ),
        # A compiled CUDA extension imported by its module name.
        Example(dedent("""\
        import torch
        import rotary_emb

        def apply(x, cos, sin):
            return rotary_emb.apply_rotary(x, cos, sin)
        """)),
        # An aliased torch.cuda call no rule knows.
        Example(dedent("""\
        import torch as th

        props = th.cuda.get_device_properties(0)
        """)),
        # A from-import of a CUDA-only package beyond deep learning.
        Example(dedent("""\
        from cupy import asarray
        """)),
        # A read with [] of a CUDA environment variable raises KeyError where it is unset.
        Example(dedent("""\
        import os

        visible = os.environ["CUDA_VISIBLE_DEVICES"].split(",")
        """)),
        # A try whose except re-raises is not a guard.
        Example(dedent("""\
        try:
            import xentropy_cuda_lib
        except ImportError:
            raise ImportError("build csrc/xentropy first")
        """)),
    ]
