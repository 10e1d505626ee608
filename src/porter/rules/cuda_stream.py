"""``torch.cuda`` streams: reported, since MPS and the CPU have no user streams."""

from __future__ import annotations

import libcst as cst

from porter.rulebase.rule import Example, Needs, Rule, Safety
from porter.rulebase.families.devices.twin_calls import twin_table


_STREAM_SUGGESTION = 's = torch.cuda.Stream() if porter_runtime.device_type() == "cuda" else None'
_STREAM_NOTE = ("needs CUDA: MPS and CPU have no user streams; run this work on the default stream "
                "there (`torch.cuda.stream(s) if s is not None else contextlib.nullcontext()`)")


class CudaStream(Rule):
    """`torch.cuda.Stream()`, `torch.cuda.stream(...)` and other stream calls are reported.

    What:
    Reports calls of `torch.cuda.Stream`, `stream`, `current_stream`,
    `default_stream`, `set_stream`, `ExternalStream` and `StreamContext`.

    Why:
    Without CUDA, `torch.cuda.Stream()` raises
    `RuntimeError: torch.cuda.Stream requires CUDA support` and `current_stream()`
    raises `AssertionError: Torch not compiled with CUDA enabled`. MPS exposes no
    user streams, so overlap code must fall back to the default stream.

    Fix safety:
    Review (no rewrite). A fake stream would lie about concurrency; which work may run
    serially instead is the author's call.

    Known limits:
    Only calls are reported; `record_stream` and `wait_stream` on the results are not
    followed.
    """

    code = "PT110"
    name = "cuda-stream"
    safety = Safety.REVIEW
    needs = Needs(
        calls_only=True,
        targets=frozenset(twin_table({name: name for name in (
            "Stream", "stream", "current_stream", "default_stream", "set_stream",
            "ExternalStream", "StreamContext")}, "streams")),
    )

    valid = [
        "def overlap(torch):\n    return torch.cuda.Stream()\n",
        "import mylib as torch\ns = torch.cuda.Stream()\n",
        "import torch\nok = isinstance(s, torch.cuda.Stream)\n",
    ]
    invalid = [
        Example("import torch\n\ns = torch.cuda.Stream()\nwith torch.cuda.stream(s):\n    y = f(x)\n"),
        Example("import torch as t\nt.cuda.current_stream().wait_stream(side)\n"),
        Example("from torch.cuda import Stream, stream\ncopy_stream = Stream(priority=-1)\n"),
    ]

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        target = self.matches(original.func)
        if target is not None:
            self.flag(original, f"`{target}` {_STREAM_NOTE}",
                      suggestion=_STREAM_SUGGESTION)
        return updated
