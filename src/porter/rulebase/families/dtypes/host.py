"""Whether a tensor expression visibly lives on the host (PT608, PT612): its float64 is fine on a Mac."""

from __future__ import annotations

import libcst as cst

#: Calls whose result is a host tensor (or a NumPy array): ``x.cpu()``, ``t.numpy()``,
#: ``torch.from_numpy(a)``, ``torch.tensor(...)``, ``torch.as_tensor(...)``.
HOST = frozenset({"cpu", "numpy", "from_numpy", "as_tensor", "tensor"})


def on_host(node: cst.BaseExpression) -> bool:
    """A call chain that visibly ends on the host: one of :data:`HOST` anywhere along it."""
    while isinstance(node, cst.Call):
        func = node.func
        if isinstance(func, cst.Name):
            return func.value in HOST
        if not isinstance(func, cst.Attribute):
            return False
        if func.attr.value in HOST:
            return True
        node = func.value
    return False
