"""Operators with no MPS kernel: they run on the CPU fallback on a Mac."""

from __future__ import annotations

from typing import NamedTuple

import libcst as cst

from porter.rulebase.rule import INFO, Example, Needs, Rule, Safety


class MissingOp(NamedTuple):
    names: tuple[str, ...]  # public callables that reach the aten op
    methods: tuple[str, ...] = ()  # Tensor methods distinctive enough to match untyped
    suggestion: str = ""


_F = "torch.nn.functional."

# aten ops that are MISSING (no MPS kernel) in the torch 2.13 column of the coverage
# table, porter_runtime/tools/mps_coverage.py (read from native_functions.yaml in the macOS
# arm64 wheels; the runtime's MPS emulation checks every operator against it), mapped
# to the public API that dispatches to them. Internal ops
# (slow_conv*, cudnn, fused attention, quantisation) and out=-only overloads are left
# out: ported code does not call them directly.
MISSING_2_13: dict[str, MissingOp] = {
    "_ctc_loss": MissingOp(("torch.nn.CTCLoss", _F + "ctc_loss", "torch.ctc_loss")),
    "_linalg_eigh": MissingOp(("torch.linalg.eigh", "torch.linalg.eigvalsh")),
    "linalg_eig": MissingOp(("torch.linalg.eig",)),
    "_linalg_eigvals": MissingOp(("torch.linalg.eigvals",)),
    "mode": MissingOp(("torch.mode",)),
    "_pdist_forward": MissingOp(("torch.pdist", _F + "pdist"),
                                suggestion="torch.cdist(x, x) has an MPS kernel; take its upper triangle"),
    "adaptive_max_pool3d": MissingOp(("torch.nn.AdaptiveMaxPool3d", _F + "adaptive_max_pool3d",
                                      _F + "adaptive_max_pool3d_with_indices")),
    "_adaptive_avg_pool3d": MissingOp(("torch.nn.AdaptiveAvgPool3d", _F + "adaptive_avg_pool3d")),
    "fractional_max_pool2d": MissingOp(("torch.nn.FractionalMaxPool2d", _F + "fractional_max_pool2d",
                                        _F + "fractional_max_pool2d_with_indices")),
    "fractional_max_pool3d": MissingOp(("torch.nn.FractionalMaxPool3d", _F + "fractional_max_pool3d",
                                        _F + "fractional_max_pool3d_with_indices")),
    "multi_margin_loss": MissingOp(("torch.nn.MultiMarginLoss", _F + "multi_margin_loss")),
    "multilabel_margin_loss_forward": MissingOp(("torch.nn.MultiLabelMarginLoss", _F + "multilabel_margin_loss")),
    "rrelu_with_noise": MissingOp(("torch.nn.RReLU", _F + "rrelu", _F + "rrelu_", "torch.rrelu", "torch.rrelu_")),
    "poisson": MissingOp(("torch.poisson", "torch.distributions.Poisson", "torch.distributions.poisson.Poisson")),
    "binomial": MissingOp(("torch.binomial", "torch.distributions.Binomial",
                           "torch.distributions.binomial.Binomial")),
    "heaviside": MissingOp(("torch.heaviside",), ("heaviside", "heaviside_"),
                           "torch.where(x == 0, values, (x > 0).to(x.dtype))"),
    "take": MissingOp(("torch.take",), suggestion="x.flatten()[index] (the same elements, with MPS kernels)"),
    "put_": MissingOp(("torch.put",), ("put_",), "x.view(-1)[index] = source (accumulate=False, contiguous x)"),
    "channel_shuffle": MissingOp(("torch.nn.ChannelShuffle", _F + "channel_shuffle", "torch.channel_shuffle"),
                                 suggestion="torch.native_channel_shuffle(x, groups) (a reshape and transpose)"),
    "linalg_lu_solve": MissingOp(("torch.linalg.lu_solve", "torch.lu_solve")),
    "linalg_ldl_factor_ex": MissingOp(("torch.linalg.ldl_factor", "torch.linalg.ldl_factor_ex")),
    "linalg_ldl_solve": MissingOp(("torch.linalg.ldl_solve",)),
    "linalg_matrix_exp": MissingOp(("torch.linalg.matrix_exp", "torch.matrix_exp"), ("matrix_exp",)),
    "geqrf": MissingOp(("torch.geqrf",), ("geqrf",)),
    "ormqr": MissingOp(("torch.ormqr",), ("ormqr",)),
    "logit_": MissingOp(("torch.logit_",), ("logit_",), "x = torch.logit(x) (out of place has an MPS kernel)"),
    "hash_tensor": MissingOp(("torch.hash_tensor",)),
    "special_airy_ai": MissingOp(("torch.special.airy_ai",)),
    "special_laguerre_polynomial_l": MissingOp(("torch.special.laguerre_polynomial_l",)),
    "special_legendre_polynomial_p": MissingOp(("torch.special.legendre_polynomial_p",)),
    "special_log_ndtr": MissingOp(("torch.special.log_ndtr",)),
    "special_ndtri": MissingOp(("torch.special.ndtri",)),
}

# Ops MPS always sends to the CPU, fallback variable or not (aten/src/ATen/mps/MPSFallback.mm).
ALWAYS_CPU: dict[str, MissingOp] = {
    "_linalg_svd": MissingOp(("torch.linalg.svd", "torch.linalg.svdvals", "torch.svd")),
}

_BY_NAME = {name: (op, False) for op, entry in MISSING_2_13.items() for name in entry.names}
_BY_NAME.update({name: (op, True) for op, entry in ALWAYS_CPU.items() for name in entry.names})
_BY_METHOD = {method: op for op, entry in MISSING_2_13.items() for method in entry.methods}


def _entry(op: str) -> MissingOp:
    return MISSING_2_13.get(op) or ALWAYS_CPU[op]


class MpsMissingOp(Rule):
    """A call of an operator with no MPS kernel is reported: it runs on the CPU on a Mac.

    What:
    Reports calls that reach an aten operator with no MPS kernel in torch 2.13
    (`nn.CTCLoss`, `torch.linalg.eigh`, `torch.linalg.eig`, `torch.mode`,
    `torch.pdist`, `nn.AdaptiveMaxPool3d`, `nn.FractionalMaxPool2d`, `torch.poisson`,
    `torch.binomial`, `torch.heaviside`, `torch.take`, `x.put_`, channel shuffle,
    `linalg.lu_solve`, `linalg.ldl_*`, `matrix_exp`, `geqrf`, `ormqr`, the margin
    losses, `rrelu`, ...) and the ops MPS always runs on the CPU (`torch.linalg.svd`).
    The table in this file is read from the torch 2.13 column of
    mps_ops_coverage.txt.

    Why:
    Without `PYTORCH_ENABLE_MPS_FALLBACK=1` these raise `NotImplementedError: The
    operator 'aten::X' is not currently implemented for the MPS device`. porter_runtime
    sets the variable when it is imported before torch (ported files import it first),
    so they run, but on the CPU: their inputs are copied from the GPU and the results
    back, with a one-time warning `This may have performance implications`. In a
    training step that can dominate the time.

    Fix safety:
    A note (severity "info"): nothing is rewritten and nothing blocks, the code runs
    as it is, so it is listed "For information" and never counted as needing a human
    (nor fails `--check`). Off the hot path
    (evaluation, a loss computed once per epoch) it can stay; in the hot path,
    compute it on the CPU deliberately or use the suggested equivalent where one is
    given.

    Known limits:
    Only direct calls of the public names in the table, and a few distinctive Tensor
    methods (`x.put_`, `x.heaviside`, `x.matrix_exp`, `x.geqrf`, `x.ormqr`,
    `x.logit_`), are matched; ops reached through other library code are not.
    Ops that gained an MPS kernel before 2.13 are not reported, though older
    torch versions still fall back for them.
    """

    code = "PT801"
    name = "mps-missing-op"
    safety = Safety.REVIEW
    severity = INFO  # a speed note: the op runs, on the CPU
    needs = Needs(calls_only=True, targets=frozenset(_BY_NAME), methods=frozenset(_BY_METHOD))

    valid = [
        "import torch\nloss = torch.nn.CrossEntropyLoss()\n",
        "def f(torch, x):\n    return torch.linalg.eigh(x)\n",
        "import mylib as torch\nv = torch.linalg.eigh(x)\n",
        "import torch\nsvd = torch.linalg.svd\n",
        "import mylib\nmylib.put_(1)\n",
    ]
    invalid = [
        Example("import torch\nw, v = torch.linalg.eigh(cov)\n"),
        Example("import torch as t\nctc = t.nn.CTCLoss(blank=0)\n"),
        Example("from torch.nn import functional as F\ny = F.pdist(x)\n"),
        Example("from torch import nn\npool = nn.AdaptiveMaxPool3d(1)\n"),
        Example("from torch.linalg import svd\nu, s, vh = svd(a)\n"),
        Example("x.put_(index, source)\n"),
    ]

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        func = original.func
        name = self.qualname(func)
        if name in _BY_NAME:
            op, always = _BY_NAME[name]
            self._flag(original, name, op, always)
        elif name is None and isinstance(func, cst.Attribute) and func.attr.value in _BY_METHOD:
            if self.qualname(func.value) is None:  # a tensor method, not ``mylib.put_``
                self._flag(original, f".{func.attr.value}()", _BY_METHOD[func.attr.value], False)
        return updated

    def _flag(self, node: cst.Call, name: str, op: str, always: bool) -> None:
        if always:
            why = f"MPS always runs aten::{op} on the CPU"
        else:
            why = (f"aten::{op} has no MPS kernel (torch 2.13); on a Mac it runs on the CPU fallback "
                   "(PYTORCH_ENABLE_MPS_FALLBACK=1, set by porter_runtime when imported before torch)")
        self.flag(node, f"`{name}`: {why}, copying its tensors to the CPU and back; slow in a hot loop",
                  suggestion=_entry(op).suggestion or "keep it off the hot path, or move that step to the CPU explicitly")
