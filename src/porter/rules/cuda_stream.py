"""``torch.cuda`` streams: reported, since MPS and the CPU have no user streams."""

from __future__ import annotations

import libcst as cst

from porter.rulebase.rule import Example, Needs, Rule, Safety
from porter.rulebase.families.devices.twin_calls import twin_table
from porter.rulebase.families.thirdparty.uses import example_code


_STREAM_SUGGESTION = 's = torch.cuda.Stream() if porter_runtime.device_type() == "cuda" else None'
_STREAM_NOTE = ("needs CUDA: MPS and CPU have no user streams; run this work on the default stream "
                "there (`torch.cuda.stream(s) if s is not None else contextlib.nullcontext()`)")
#: The stream calls with a twin (porter_runtime: CUDA's own on CUDA, the device's one queue elsewhere).
_TWINNED = frozenset({"Stream", "stream", "current_stream", "default_stream"})


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
    """`torch.cuda.Stream()`, `stream(s)`, `current_stream()`, `default_stream()` become the runtime's.

    What:
    `torch.cuda.Stream(...)`, `torch.cuda.stream(s)`, `torch.cuda.current_stream(...)`
    and `torch.cuda.default_stream(...)` become the same calls on `porter_runtime`
    (PT117 does `tensor.record_stream(s)`). `set_stream`, `ExternalStream` and
    `StreamContext` are reported.

    Why:
    Without CUDA, `torch.cuda.Stream()` raises
    `RuntimeError: torch.cuda.Stream requires CUDA support` and `current_stream()`
    raises `AssertionError: Torch not compiled with CUDA enabled`: a loader that copies
    the next batch on a side stream (LAVIS's and MiniGPT-4's `PrefetchLoader`, blind
    rounds 11 and 12) stops the run.

    Fix safety:
    Safe. On CUDA each twin is the `torch.cuda` call with the same arguments. Elsewhere
    there is one queue (MPS and the CPU have no user streams): a `DeviceQueue` whose
    `wait_stream`, `wait_event` and `record_event` are already met, and `stream(s)` keeps
    the work on it. Code that synchronizes its streams as CUDA requires computes the same
    in program order; only the overlap is gone. Setting or wrapping a raw stream is the
    author's call, so those stay findings.

    `torch.cuda.current_stream(...)` passed straight to an event's `record` or `wait`
    is PT113's.

    Known limits:
    A stream class used other than by a call (`isinstance(s, torch.cuda.Stream)`) is left
    as it is. In a module that reads a stream's raw handle (`stream.cuda_stream`, for a
    CUTLASS or driver call) the streams stay findings.
    """

    code = "PT110"
    name = "cuda-stream"
    safety = Safety.SAFE
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
        Example(
            example_code("""
            import torch


            class PrefetchLoader(object):
                def __init__(self, loader):
                    self.loader = loader
                    self.stream = torch.cuda.Stream()

                def preload(self, it):
                    self.batch = next(it)
                    with torch.cuda.stream(self.stream):
                        self.batch = move_to_cuda(self.batch)

                def next(self, it):
                    torch.cuda.current_stream().wait_stream(self.stream)
                    batch = self.batch
                    self.preload(it)
                    return batch
            """),
            example_code("""
            import porter_runtime


            class PrefetchLoader(object):
                def __init__(self, loader):
                    self.loader = loader
                    self.stream = porter_runtime.Stream()

                def preload(self, it):
                    self.batch = next(it)
                    with porter_runtime.stream(self.stream):
                        self.batch = move_to_cuda(self.batch)

                def next(self, it):
                    porter_runtime.current_stream().wait_stream(self.stream)
                    batch = self.batch
                    self.preload(it)
                    return batch
            """),
        ),
        Example("from torch.cuda import Stream\ncopy_stream = Stream(priority=-1)\n",
                "import porter_runtime\ncopy_stream = porter_runtime.Stream(priority=-1)\n"),
        Example("import torch\n\ntorch.cuda.set_stream(side)\n"),
    ]

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        target = self.matches(original.func)
        if target is None:
            return updated
        if target.endswith(".current_stream") and id(original) in self._event_streams():
            return updated  # PT113
        last = target.rsplit(".", 1)[-1]
        if last in _TWINNED and not any(a.star for a in original.args) and not self._raw_handles():
            return self.rewrite(original, updated.with_changes(func=self.runtime(last)),
                                f"`{target}` is CUDA's on CUDA; elsewhere the device's one queue, where the "
                                "work runs in program order (MPS and the CPU have no user streams)")
        self.flag(original, f"`{target}` {_STREAM_NOTE}", suggestion=_STREAM_SUGGESTION)
        return updated

    def _raw_handles(self) -> bool:
        """The module reads a stream's raw handle (``stream.cuda_stream`` for a CUTLASS or
        driver call): CUDA's own, so its streams stay findings."""
        if not hasattr(self, "_raw"):
            self._raw = ".cuda_stream" in self.ctx.module.code
        return self._raw


class RecordStream(Rule):
    """`tensor.record_stream(s)` becomes `porter_runtime.record_stream(tensor, s)`.

    What:
    The caching allocator's `tensor.record_stream(s)` (a prefetching loader marks each
    batch it copied on a side stream) becomes `porter_runtime.record_stream(tensor, s)`.

    Why:
    Off CUDA the tensor is on MPS or the CPU and the stream is PT110's one queue:
    `record_stream` refuses it.

    Fix safety:
    Safe. On CUDA it is `tensor.record_stream(s)`; elsewhere nothing, since one queue
    frees memory in program order.

    Known limits:
    Only a call with the stream as its one positional argument.
    """

    code = "PT117"
    name = "record-stream"
    safety = Safety.SAFE
    needs = Needs(methods=frozenset({"record_stream"}))

    valid = [
        "def f(x, s):\n    return x.record_stream(s, extra)\n",
        "def f(x):\n    return x.record_stream\n",
    ]
    invalid = [
        Example(
            example_code("""
            def next(self):
                batch = self.batch
                if batch is not None:
                    for t in batch.values():
                        t.record_stream(torch.cuda.current_stream())
                return batch
            """),
            example_code("""
            import porter_runtime
            def next(self):
                batch = self.batch
                if batch is not None:
                    for t in batch.values():
                        porter_runtime.record_stream(t, torch.cuda.current_stream())
                return batch
            """),
        ),
    ]

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        func = original.func
        if not (isinstance(func, cst.Attribute) and func.attr.value == "record_stream") or len(original.args) != 1 \
                or original.args[0].star or original.args[0].keyword is not None:
            return updated
        new = self.runtime_call("record_stream", updated.func.value, updated.args[0].value)  # type: ignore[attr-defined]
        return self.rewrite(original, new, "the allocator's stream mark is CUDA's on CUDA and nothing elsewhere, "
                            "where one queue frees memory in order")


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
    so the event is recorded where the original recorded it. Elsewhere it is the
    device's one queue (a `DeviceQueue`: MPS and the CPU have no user streams), which the
    runtime's `Event` twins record on.

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
