"""``torch.cuda`` streams: reported, since MPS and the CPU have no user streams."""

from __future__ import annotations

import libcst as cst

from porter.rulebase.rule import Example, Needs, Rule, Safety
from porter.rulebase.families.devices.twin_calls import twin_table
from porter.rulebase.families.thirdparty.uses import example_code


_STREAM_SUGGESTION = 's = torch.cuda.Stream() if porter_runtime.device_type() == "cuda" else None'
_STREAM_NOTE = ("needs CUDA: MPS and CPU have no user streams; run this work on the default stream "
                "there (`torch.cuda.stream(s) if s is not None else contextlib.nullcontext()`)")


class _EventStreams:
    """Mixin: which calls are passed straight as the one stream argument of an event's
    ``record`` / ``wait`` (``start.record(torch.cuda.current_stream(device))``)."""

    def visit_Call(self, node: cst.Call) -> None:
        """Note a call passed as the one stream argument of an event's record/wait."""
        if isinstance(node.func, cst.Attribute) and node.func.attr.value in ("record", "wait") \
                and len(node.args) == 1 and not node.args[0].star:
            arg = node.args[0]
            if arg.keyword is None or arg.keyword.value == "stream":
                self._event_streams().add(id(arg.value))

    def _event_streams(self) -> set[int]:
        if not hasattr(self, "_streams"):
            self._streams: set[int] = set()
        return self._streams


class CudaStream(_EventStreams, Rule):
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

    `torch.cuda.current_stream(...)` passed straight to an event's `record` or `wait`
    is PT113's.

    Known limits:
    Only calls are reported; `record_stream` and `wait_stream` on the results are not
    followed.
    """

    code = "PT110"
    name = "cuda-stream"
    safety = Safety.REVIEW
    #: A note in a module whose top level already imports a CUDA-only package (its finding comes first).
    restates_requirement = True
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
        if target is None:
            return updated
        if target.endswith(".current_stream") and id(original) in self._event_streams():
            return updated  # PT113
        self.flag(original, f"`{target}` {_STREAM_NOTE}", suggestion=_STREAM_SUGGESTION)
        return updated


class EventStream(_EventStreams, Rule):
    """`event.record(torch.cuda.current_stream(d))` records on `porter_runtime.current_stream(d)`.

    What:
    Rewrites `torch.cuda.current_stream(...)` where it is passed straight as the stream
    of an event's `record` or `wait` (the StyleGAN training loops'
    `phase.start_event.record(torch.cuda.current_stream(device))`), with PT108 making
    the event itself `porter_runtime.Event`.

    Why:
    Without CUDA `torch.cuda.current_stream()` raises `AssertionError: Torch not
    compiled with CUDA enabled`, so timing code stops a training loop that would
    otherwise run.

    Fix safety:
    Safe. On CUDA `porter_runtime.current_stream(d)` is `torch.cuda.current_stream(d)`,
    so the event is recorded where the original recorded it. Elsewhere it is None,
    which the runtime's `Event` twins take as the device's one queue (MPS and the CPU
    have no user streams).

    Known limits:
    A stream kept in a variable before it reaches the event is reported by PT110.
    """

    code = "PT113"
    name = "event-stream"
    safety = Safety.SAFE
    #: A note in a module whose top level already imports a CUDA-only package (its finding comes first).
    restates_requirement = True
    needs = Needs(calls_only=True, targets=frozenset(twin_table({"current_stream": "current_stream"}, "streams")))

    valid = [
        "import torch\nstream = torch.cuda.current_stream()\nstream.synchronize()\n",
        "def f(torch, e):\n    e.record(torch.cuda.current_stream())\n",
    ]
    invalid = [
        Example(  # the event's stream: exact, rewritten
            example_code("""
            import torch


            def run_phase(phase, device):
                if phase.start_event is not None:
                    phase.start_event.record(torch.cuda.current_stream(device))
                phase.module.requires_grad_(True)
                if phase.end_event is not None:
                    phase.end_event.record(stream=torch.cuda.current_stream(device))
            """),
            example_code("""
            import porter_runtime


            def run_phase(phase, device):
                if phase.start_event is not None:
                    phase.start_event.record(porter_runtime.current_stream(device))
                phase.module.requires_grad_(True)
                if phase.end_event is not None:
                    phase.end_event.record(stream=porter_runtime.current_stream(device))
            """),
        ),
    ]

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        target = self.matches(original.func)
        if target is None or not target.endswith(".current_stream") or id(original) not in self._event_streams():
            return updated
        new = updated.with_changes(func=self.runtime("current_stream"))
        return self.rewrite(original, new, "the event is recorded on CUDA's current stream on CUDA, as "
                            "before, and on the device's only queue elsewhere")
