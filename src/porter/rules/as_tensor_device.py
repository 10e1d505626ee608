"""``torch.as_tensor(array, device=d)`` with no dtype goes through the runtime (PT610):
NumPy's default dtype is float64, which MPS can't hold."""

from __future__ import annotations

from textwrap import dedent

import libcst as cst

from porter.rulebase.rule import Example, Needs, Rule, Safety, keyword, positional, string_value


def _literal(node: cst.BaseExpression) -> bool:
    """Data written out (``[1.0, 2.0]``, ``3``): torch makes it float32 or an integer type."""
    if isinstance(node, (cst.Integer, cst.Float, cst.SimpleString)):
        return True
    if isinstance(node, cst.Name):
        return node.value in ("True", "False", "None")
    if isinstance(node, cst.UnaryOperation):
        return _literal(node.expression)
    if isinstance(node, (cst.List, cst.Tuple)):
        return all(isinstance(e, cst.Element) and _literal(e.value) for e in node.elements)
    return False


def _cpu(node: cst.BaseExpression) -> bool:
    """``"cpu"``, ``torch.device("cpu")``: a tensor that stays on the CPU keeps float64 on a Mac too."""
    if string_value(node) == "cpu":
        return True
    return isinstance(node, cst.Call) and bool(node.args) and string_value(node.args[0].value) == "cpu"


class AsTensorDevice(Rule):
    """`torch.as_tensor(points, device=d)` with no dtype becomes `porter_runtime.as_tensor(points, device=d)`.

    What:
    Rewrites `torch.as_tensor(x, device=d)` (also `torch.as_tensor(x, None, d)`) that gives
    no dtype, where `x` is not data written out in the call (a list of numbers) and `d` is
    not the CPU, to `porter_runtime.as_tensor(x, device=d)`.

    Why:
    A NumPy array is float64 unless made otherwise (`np.linspace`, `astype(float)`), and
    `as_tensor` keeps its dtype: on a Mac the move to MPS raises `TypeError: Cannot convert a
    MPS Tensor to float64 dtype`. Segment Anything's automatic mask generator (and
    MobileSAM's copy of it, blind round 13) moves its float64 point grid so.

    Fix safety:
    Safe. `porter_runtime.as_tensor` makes the same call wherever the target is not MPS
    (on CUDA and the CPU the dtype stays float64). To MPS, float64 / complex128 data
    becomes float32 / complex64 with a one-time warning, the one precision MPS has.

    Known limits:
    `torch.tensor(x, device=d)` and `torch.from_numpy(x).to(d)` (PT605) are not rewritten
    here: the first copies lists of Python numbers far more often than arrays.
    """

    code = "PT610"
    name = "as-tensor-device"
    safety = Safety.SAFE
    needs = Needs(calls_only=True, targets=frozenset({"torch.as_tensor"}))

    valid = [
        "import torch\nx = torch.as_tensor(points, dtype=torch.float32, device=device)\n",
        "import torch\nx = torch.as_tensor(points)\n",
        "import torch\nx = torch.as_tensor([0.5, 1.5], device=device)\n",
        "import torch\nx = torch.as_tensor(points, device='cpu')\n",
        "import mylib as torch\nx = torch.as_tensor(points, device=device)\n",
    ]
    invalid = [
        Example(  # segment_anything/automatic_mask_generator.py, MobileSAM's copy
            dedent("""\
                import torch


                class SamAutomaticMaskGenerator:
                    def _process_batch(self, points, im_size):
                        transformed_points = self.predictor.transform.apply_coords(points, im_size)
                        in_points = torch.as_tensor(transformed_points, device=self.predictor.device)
                        in_labels = torch.ones(in_points.shape[0], dtype=torch.int, device=in_points.device)
                        return in_points, in_labels
                """),
            dedent("""\
                import porter_runtime
                import torch


                class SamAutomaticMaskGenerator:
                    def _process_batch(self, points, im_size):
                        transformed_points = self.predictor.transform.apply_coords(points, im_size)
                        in_points = porter_runtime.as_tensor(transformed_points, device=self.predictor.device)
                        in_labels = torch.ones(in_points.shape[0], dtype=torch.int, device=in_points.device)
                        return in_points, in_labels
                """),
        ),
    ]

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        if self.matches(original.func) is None:
            return updated
        args = positional(original)
        data = args[0].value if args else None
        device = keyword(original, "device")
        device_value = device.value if device is not None else (args[2].value if len(args) > 2 else None)
        dtype = keyword(original, "dtype")
        dtype_value = dtype.value if dtype is not None else (args[1].value if len(args) > 1 else None)
        if data is None or device_value is None or _literal(data) or _cpu(device_value):
            return updated
        if dtype_value is not None and not (isinstance(dtype_value, cst.Name) and dtype_value.value == "None"):
            return updated
        if any(a.star for a in original.args):
            return updated
        new = updated.with_changes(func=self.runtime("as_tensor"))
        return self.rewrite(original, new, "a tensor made on the device from data whose dtype may be float64 (a "
                            "NumPy array's default) now becomes float32 on MPS only, which has no float64")
