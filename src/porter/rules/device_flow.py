"""CUDA indices that cross modules: the value made in one file, used as a device in another
(issue 27). The repository-wide model (porter.project, porter.project.value_flow) follows them."""

from __future__ import annotations

from textwrap import dedent

import libcst as cst

from porter.project.query import Scoped, is_cuda_index
from porter.rulebase.rule import Example, Needs, Rule, Safety
from porter.rulebase.syntax import argument_pair, callee_name, replace_arg


def _in_the_flow(project, path: str) -> bool:
    return path in project.flow.files



_SAMPLER = dedent("""\
    import torch as th

    class GaussianDiffusion:
        def p_sample_loop(self, model, shape, noise=None, device=None, progress=False):
            if device is None:
                device = next(model.parameters()).device
            img = th.randn(*shape, device=device)
            for i in range(3):
                t = th.tensor([i] * shape[0], device=device)
                img = model(img, t)
            return img
    """)

_NETWORKS = dedent("""\
    def init_net(net, init_type="normal", gpu_ids=[]):
        if len(gpu_ids) > 0:
            net.to(gpu_ids[0])
        return net

    def define_G(ngf, gpu_ids=[]):
        return init_net(Generator(ngf), "normal", gpu_ids)
    """)

_OPTIONS = dedent("""\
    import torch

    def parse(opt):
        opt.gpu_ids = [int(i) for i in opt.gpu_ids.split(",") if int(i) >= 0]
        if len(opt.gpu_ids) > 0:
            torch.cuda.set_device(opt.gpu_ids[0])
        return opt
    """)


#: A helper of another module that sets up the process group and returns the CUDA index.
_DIST_SETUP = dedent("""\
    import os

    import torch
    import torch.distributed as dist


    def setup():
        dist.init_process_group("nccl")
        rank = dist.get_rank()
        local_rank = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(local_rank)
        return rank, local_rank, rank % torch.cuda.device_count()
    """)
_TRAIN = dedent("""\
    import torch
    from diffusion import create_diffusion
    from utils import dist


    def main(model):
        rank, local_rank, device = dist.setup()
        diffusion = create_diffusion("250")
        return diffusion.p_sample_loop(model, (2, 4), device=device)
    """)


class CudaIndexFlow(Scoped, Rule):
    """A CUDA index made in one module and used as a device in another resolves on this machine.

    What:
    Follows integer CUDA indices across the repository (porter.project.value_flow): a value
    made by `rank % torch.cuda.device_count()`, `torch.cuda.current_device()` or
    `int(os.environ["LOCAL_RANK"])`, or passed to `torch.cuda.set_device` (a list of
    them: `gpu_ids`, whose `gpu_ids[0]` the code passes there), through assignments,
    attributes (`self.gpu_ids = opt.gpu_ids`), the arguments of the repository's own
    functions, methods and classes, and what they return (`rank, local_rank, device =
    dist.setup()`, where every `return` of every definition agrees). Where such a value reaches a device use:
    - `x.to(v)` or `device=v` of a torch callable, in any module: `v` becomes
      `porter_runtime.device(v)` (CUT's `init_net`: `net.to(gpu_ids[0])`);
    - an argument of the repository's own function whose parameter is only ever used
      as a device there (`device=`, `.to(p)`, `p is None`): the argument becomes
      `porter_runtime.device(v)` at the call (DiT's `diffusion.p_sample_loop(...,
      device=device)`, whose `device` reaches `th.tensor(..., device=device)`).

    Why:
    An integer device means a CUDA index; without an accelerator `net.to(0)` and
    `th.tensor(..., device=0)` raise `RuntimeError: Cannot access accelerator device
    when none is available.` The per-file rule (PT901) cannot see an index that another
    module made.

    Fix safety:
    Safe. On CUDA `porter_runtime.device(i)` is `torch.device("cuda", i)`, the device an
    integer `i` means to torch; the callee's parameter is rewritten at the call only when
    every definition the call may reach uses it as a device and nothing else.

    Known limits:
    Attributes are followed by name, whatever the object; a method call is resolved by
    the method's name over the repository's classes (every definition must agree). A
    value passed through `*args`/`**kwargs`, a container other than a list, or a
    third-party function is not followed. Only files the model followed are looked at.
    """

    code = "PT907"
    name = "cuda-index-flow"
    safety = Safety.SAFE
    #: No words: without a model (a file alone) the rule has nothing to follow.
    needs = Needs(whole_file=True, project=_in_the_flow)

    valid = [
        # no model (one file alone): nothing to follow
        "def init_net(net, gpu_ids):\n    net.to(gpu_ids[0])\n",
        # the callee does arithmetic with the parameter: not only a device there
        Example(
            dedent("""\
            from sampler import run

            device = rank % torch.cuda.device_count()
            run(device=device)
            """),
            project=(("sampler.py", "def run(device=0):\n    return device + 1\n"),),
            path="main.py",
        ),
        # a dtype, never a device
        Example("import torch\nx = x.to(torch.float16)\n", project=(("other.py", "x = 1\n"),)),
        # one caller passes a CUDA index, another a string: the sampler forwards `device` as it came
        Example(
            dedent("""\
            import torch as th

            class Sampler:
                def sample_loop(self, model, shape, device=None):
                    return self.sample_loop_progressive(model, shape, device=device)

                def sample_loop_progressive(self, model, shape, device=None):
                    return th.randn(*shape, device=device)
            """),
            path="diffusion/sampler.py",
            project=(("sample_ddp.py", "import torch\nfrom diffusion.sampler import Sampler\n\n"
                      "device = rank % torch.cuda.device_count()\nSampler().sample_loop(net, (2,), device=device)\n"),
                     ("sample.py", "import torch\nfrom diffusion.sampler import Sampler\n\n"
                      "device = 'cuda' if torch.cuda.is_available() else 'cpu'\n"
                      "Sampler().sample_loop(net, (2,), device=device)\n")),
        ),
    ]
    invalid = [
        Example(  # CUT: the option's gpu_ids reach init_net through define_G, in another module
            _NETWORKS,
            _NETWORKS.replace("net.to(gpu_ids[0])", "net.to(porter_runtime.device(gpu_ids[0]))")
            .replace("def init_net", "import porter_runtime\ndef init_net", 1),
            path="models/networks.py",
            project=(("options/base_options.py", _OPTIONS),
                     ("models/cut_model.py", "from . import networks\n\nclass CUTModel:\n    def __init__(self, opt):\n"
                      "        self.gpu_ids = opt.gpu_ids\n        self.netG = networks.define_G(64, self.gpu_ids)\n")),
            line=3, message="CUDA index",
        ),
        Example(  # DiT: an int device passed to the repository's own sampler
            dedent("""\
            import torch
            from diffusion import create_diffusion

            def main(rank, model):
                device = rank % torch.cuda.device_count()
                diffusion = create_diffusion("250")
                return diffusion.p_sample_loop(model, (2, 4), device=device)
            """),
            dedent("""\
            import porter_runtime
            import torch
            from diffusion import create_diffusion

            def main(rank, model):
                device = rank % torch.cuda.device_count()
                diffusion = create_diffusion("250")
                return diffusion.p_sample_loop(model, (2, 4), device=porter_runtime.device(device))
            """),
            path="sample_ddp.py",
            project=(("diffusion/gaussian_diffusion.py", _SAMPLER),),
            line=7, message="only as a device",
        ),
        Example(  # the index a set-up helper of another module returns (DiT / fast-DiT's train.py)
            _TRAIN,
            _TRAIN.replace("device=device)", "device=porter_runtime.device(device))")
            .replace("import torch\n", "import porter_runtime\nimport torch\n", 1),
            path="train.py",
            project=(("utils/dist.py", _DIST_SETUP), ("diffusion/gaussian_diffusion.py", _SAMPLER)),
            line=9, message="only as a device",
        ),
    ]

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        project = self.ctx.project
        if project is None:
            return updated
        func = original.func
        name = self.qualname(func)
        if isinstance(func, cst.Attribute) and func.attr.value == "to" and self.qualname(func.value) is None:
            return self._wrap(original, updated, "device", 0, "a CUDA index from another module reaches `.to()`")
        if name is not None and name.startswith("torch.") and not name.startswith("torch.cuda."):
            return self._wrap(original, updated, "device", None, "a CUDA index from another module reaches `device=`")
        return self._into_own_function(original, updated, name)

    def _wrap(self, original: cst.Call, updated: cst.Call, keyword: str, index, message: str) -> cst.BaseExpression:
        old, new = argument_pair(original, updated, keyword, index)
        if old is None or old.star or not new.value.deep_equals(old.value):
            return updated  # not passed, or another rule (PT901) already rewrote it
        if not is_cuda_index(self.ctx.project, self.scope, old.value):
            return updated
        call = replace_arg(updated, new, self.runtime_call("device", new.value))
        return self.rewrite(original, call, message + "; it now resolves on this machine")

    def _into_own_function(self, original: cst.Call, updated: cst.Call, name) -> cst.BaseExpression:
        """An index passed to a parameter every definition of the callee uses only as a device."""
        if name is not None and name.split(".")[0] not in self.ctx.project.roots:
            return updated  # a third-party callee
        callee = callee_name(original.func)
        definitions = self.ctx.project.flow.callees.get(callee, ())
        if not definitions or any(a.star for a in original.args):
            return updated
        call = updated
        for position, (old, new) in enumerate(zip(original.args, updated.args)):
            if not new.value.deep_equals(old.value) or not is_cuda_index(self.ctx.project, self.scope, old.value):
                continue
            if all(_param(d, old, position) in d.device_only for d in definitions):
                call = replace_arg(call, call.args[position], self.runtime_call("device", new.value))
        if call is updated:
            return updated
        return self.rewrite(original, call, f"a CUDA index passed to `{callee}`, which uses it only as a device; "
                            "it now resolves on this machine")


def _param(definition, arg: cst.Arg, position: int) -> str:
    if arg.keyword is not None:
        return arg.keyword.value
    params = definition.params[1:] if definition.method else definition.params
    return params[position] if position < len(params) else ""
