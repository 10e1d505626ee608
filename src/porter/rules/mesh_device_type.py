"""A device mesh made for a device type given as a value (PT116): ``init_device_mesh(
device_type, ...)`` where the type comes from a config or a parameter."""

from __future__ import annotations

from textwrap import dedent

import libcst as cst

from porter.rulebase.rule import Example, Needs, Rule, Safety, string_value
from porter.rulebase.syntax import runtime_call_of

_MESHES = frozenset({
    "torch.distributed.device_mesh.init_device_mesh", "torch.distributed.init_device_mesh",
    "torch.distributed.device_mesh.DeviceMesh", "torch.distributed.DeviceMesh",
})


class MeshDeviceTypeValue(Rule):
    """`init_device_mesh(device_type, ...)` passes its type through `porter_runtime.mesh_device_type`.

    What:
    Wraps the device type of `init_device_mesh` and `DeviceMesh` (the first argument,
    or `device_type=`) when it is a value rather than a literal: a parameter, a config's
    `cfg.device`, `self.device_type`.

    Why:
    FSDP2 trainers read the type from their config, where it says `cuda` (torchtune's
    `device: cuda` in every distributed recipe, passed as `ParallelDims.build_mesh(
    cfg.device)`). Without CUDA the mesh sets the CUDA device up and fails:
    `AttributeError: module 'torch._C' has no attribute '_cuda_setDevice'`. A literal
    `"cuda"` is PT004's.

    Fix safety:
    Safe. On CUDA `porter_runtime.mesh_device_type(value)` is `value`. Elsewhere a
    value naming CUDA becomes the resolved device's type, as PT004 does for the literal
    (`cpu` in a process on a Mac, where Gloo can't communicate MPS tensors); any other
    value is kept.

    Known limits:
    The value is read where the mesh is made; a device type stored for other uses
    (`torch.device(cfg.device)`) is the device rules' or PT701's.
    """

    code = "PT116"
    name = "mesh-device-type-value"
    safety = Safety.SAFE
    needs = Needs(calls_only=True, targets=_MESHES)

    valid = [
        "from torch.distributed.device_mesh import init_device_mesh\nmesh = init_device_mesh('cpu', (2,))\n",
        "from torch.distributed.device_mesh import init_device_mesh\nmesh = init_device_mesh('cuda', (2,))\n",
        "import porter_runtime\nfrom torch.distributed.device_mesh import init_device_mesh\n"
        "mesh = init_device_mesh(porter_runtime.mesh_device_type(device_type), (2,))\n",
        "def build(init_device_mesh, device_type):\n    return init_device_mesh(device_type, (2,))\n",
    ]
    invalid = [
        Example(
            dedent("""\
                from torch.distributed.device_mesh import init_device_mesh


                class ParallelDims:
                    def build_mesh(self, device_type: str):
                        return init_device_mesh(
                            device_type,
                            mesh_shape=(self.dp_replicate, self.dp_shard),
                            mesh_dim_names=("dp_replicate", "dp_shard"),
                        )
                """),
            dedent("""\
                import porter_runtime
                from torch.distributed.device_mesh import init_device_mesh


                class ParallelDims:
                    def build_mesh(self, device_type: str):
                        return init_device_mesh(
                            porter_runtime.mesh_device_type(device_type),
                            mesh_shape=(self.dp_replicate, self.dp_shard),
                            mesh_dim_names=("dp_replicate", "dp_shard"),
                        )
                """),
        ),
        Example(
            "import torch.distributed as dist\n\nmesh = dist.DeviceMesh(device_type=cfg.device, mesh=list(range(world)))\n",
            "import porter_runtime\nimport torch.distributed as dist\n\n"
            "mesh = dist.DeviceMesh(device_type=porter_runtime.mesh_device_type(cfg.device), mesh=list(range(world)))\n",
        ),
    ]

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        if self.matches(original.func) is None:
            return updated
        args = list(updated.args)
        found = next((i for i, a in enumerate(args) if a.keyword is not None and a.keyword.value == "device_type"), None)
        if found is None and args and args[0].keyword is None and not args[0].star:
            found = 0
        if found is None:
            return updated
        value = original.args[found].value
        if string_value(value) is not None or isinstance(value, (cst.FormattedString, cst.ConcatenatedString)) \
                or runtime_call_of(value) is not None:
            return updated  # a literal is PT004's (or a device type it does not need); ours already
        args[found] = args[found].with_changes(value=self.runtime_call("mesh_device_type", args[found].value))
        return self.rewrite(original, updated.with_changes(args=args),
                            "the mesh's device type, given as a value, now resolves off CUDA "
                            "(porter_runtime.mesh_device_type; unchanged on CUDA)")
