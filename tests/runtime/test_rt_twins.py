"""torch.cuda twins: verbatim forwarding on CUDA, torch.mps on MPS, neutral on CPU."""
from __future__ import annotations

import time

import pytest
import torch

import porter_runtime

# (runtime function, torch.cuda function, arguments the user passed)
FORWARDED = [
    ("synchronize", "synchronize", (1,)),
    ("synchronize", "synchronize", (None,)),
    ("empty_cache", "empty_cache", ()),
    ("manual_seed", "manual_seed", (7,)),
    ("manual_seed_all", "manual_seed_all", (7,)),
    ("get_rng_state", "get_rng_state", ("cuda:1",)),
    ("set_rng_state", "set_rng_state", ("state", 1)),
    ("get_rng_state_all", "get_rng_state_all", ()),
    ("set_rng_state_all", "set_rng_state_all", (["s0", "s1"],)),
    ("device_count", "device_count", ()),
    ("current_device", "current_device", ()),
    ("set_device", "set_device", (1,)),
    ("cuda_device", "device", (1,)),
    ("device_name", "get_device_name", (0,)),
    ("get_device_properties", "get_device_properties", ("cuda:1",)),
    ("get_device_capability", "get_device_capability", (0,)),
    ("memory_allocated", "memory_allocated", (1,)),
    ("max_memory_allocated", "max_memory_allocated", (None,)),
    ("memory_reserved", "memory_reserved", (0,)),
    ("max_memory_reserved", "max_memory_reserved", (0,)),
    ("reset_peak_memory_stats", "reset_peak_memory_stats", (0,)),
    ("mem_get_info", "mem_get_info", (0,)),
    ("memory_stats", "memory_stats", ("cuda:0",)),
    ("reset_accumulated_memory_stats", "reset_accumulated_memory_stats", (None,)),
    ("memory_summary", "memory_summary", (0, True)),
    ("power_draw", "power_draw", (None,)),
    ("utilization", "utilization", (1,)),
    ("temperature", "temperature", (None,)),
    ("clock_rate", "clock_rate", (None,)),
]
RESULTS = {"device_count": 2, "current_device": 1, "get_device_name": "NVIDIA H100",
           "memory_allocated": 11, "max_memory_allocated": 12, "memory_reserved": 13,
           "max_memory_reserved": 14, "mem_get_info": (5, 10), "get_device_properties": "P", "get_device_capability": (9, 0),
           "memory_stats": {"num_ooms": 3}, "memory_summary": "|===|", "power_draw": 61000,
           "utilization": 97, "temperature": 70, "clock_rate": 1980}


@pytest.mark.parametrize("ours,theirs,args", FORWARDED)
def test_cuda_forwards_arguments_verbatim(simulate, ours, theirs, args):
    machine = simulate("cuda")
    recorder = machine.record(torch.cuda, theirs, RESULTS.get(theirs))
    result = getattr(porter_runtime, ours)(*args)
    assert recorder.calls == [(args, {})]
    if theirs in RESULTS and theirs != "device_count":
        assert result == RESULTS[theirs]


def test_cuda_is_bf16_supported_forwards(simulate):
    machine = simulate("cuda")
    recorder = machine.record(torch.cuda, "is_bf16_supported", True)
    assert porter_runtime.is_bf16_supported() is True
    porter_runtime.is_bf16_supported(including_emulation=False)
    assert recorder.calls == [((), {}), ((), {"including_emulation": False})]


def test_cuda_event_is_a_real_cuda_event(simulate):
    machine = simulate("cuda")
    recorder = machine.record(torch.cuda, "Event", "cuda-event")
    assert porter_runtime.Event(enable_timing=True) == "cuda-event"
    assert recorder.calls == [((), {"enable_timing": True, "blocking": False,
                                    "interprocess": False})]


MPS_TWINS = [
    ("synchronize", "synchronize", (), None),
    ("empty_cache", "empty_cache", (), None),
    ("manual_seed", "manual_seed", (3,), None),
    ("manual_seed_all", "manual_seed", (3,), None),
    ("device_count", "device_count", (), 1),
    ("memory_allocated", "current_allocated_memory", (), 100),
    ("memory_reserved", "driver_allocated_memory", (), 200),
]


@pytest.mark.parametrize("ours,twin,args,result", MPS_TWINS)
def test_mps_calls_the_torch_mps_twin(simulate, ours, twin, args, result):
    machine = simulate("mps")
    recorder = machine.record(torch.mps, twin, result)
    cuda_spy = machine.record(torch.cuda, twin, None)
    value = getattr(porter_runtime, ours)(*args)
    assert len(recorder.calls) == 1 and not cuda_spy.calls
    if result is not None:
        assert value == result


def test_mps_neutral_results(simulate, monkeypatch):
    machine = simulate("mps")
    machine.record(torch.mps, "recommended_max_memory", 1000)
    machine.record(torch.mps, "driver_allocated_memory", 300)
    machine.record(torch.backends.mps, "get_name", "Apple M3 Max")
    machine.record(torch.backends.mps, "get_core_count", 40)
    monkeypatch.setattr(torch.accelerator, "get_memory_info",
                        lambda: (_ for _ in ()).throw(RuntimeError("not a DeviceAllocator")))
    assert porter_runtime.mem_get_info() == (700, 1000)
    assert porter_runtime.current_device() == 0
    assert porter_runtime.set_device(0) is None
    props = porter_runtime.get_device_properties()
    assert props == porter_runtime.DeviceProperties("Apple M3 Max", "mps", 1000, 40, 0, 0)
    assert porter_runtime.get_device_capability() == (props.major, props.minor) == (0, 0)
    assert porter_runtime.device_name() == "Apple M3 Max"


def test_mps_event_is_torch_mps_event(simulate, monkeypatch):
    simulate("mps")
    made, calls = [], []

    class FakeMpsEvent:  # torch.mps.Event needs a Metal device
        def __init__(self, **kwargs):
            made.append(kwargs)

        def record(self):
            calls.append("record")

        def wait(self):
            calls.append("wait")

    monkeypatch.setattr(torch.mps, "Event", FakeMpsEvent)
    event = porter_runtime.Event(enable_timing=True, blocking=True)
    assert isinstance(event, FakeMpsEvent) and made == [{"enable_timing": True}]
    event.record(porter_runtime.current_stream())  # the one queue off CUDA
    event.wait(None)
    assert calls == ["record", "wait"]


def test_cpu_neutral_results_on_this_machine():
    assert porter_runtime.device_type() == "cpu"
    assert porter_runtime.synchronize() is None
    assert porter_runtime.empty_cache() is None
    assert porter_runtime.device_count() == 1
    assert porter_runtime.current_device() == 0
    assert porter_runtime.set_device(1) is None
    for index in (None, 0):  # `with torch.cuda.device(x.device.index):` before a kernel's launch
        with porter_runtime.cuda_device(index):
            assert torch.ones(2).sum().item() == 2.0
    assert porter_runtime.device_name().startswith("CPU")
    for fn in (porter_runtime.memory_allocated, porter_runtime.max_memory_allocated,
               porter_runtime.memory_reserved, porter_runtime.max_memory_reserved):
        assert fn() == 0
    assert porter_runtime.reset_peak_memory_stats() is None
    free, total = porter_runtime.mem_get_info()
    assert 0 <= free <= total
    props = porter_runtime.get_device_properties()
    assert props.name == porter_runtime.device_name() and props.multi_processor_count >= 1
    assert porter_runtime.get_device_capability() == (0, 0)  # no CUDA capability: `major < 8` branches take the older-GPU path


def test_cpu_memory_stats_answers_a_memory_monitors_keys():
    """torchtitan's and lingua's monitors index these keys; torch.cuda.memory_stats()
    is {} without CUDA, so each would raise KeyError."""
    assert torch.cuda.memory_stats() == {}
    stats = porter_runtime.memory_stats("cuda:0")
    for key in ("active_bytes.all.peak", "reserved_bytes.all.peak", "allocated_bytes.all.current",
                "num_alloc_retries", "num_ooms", "requested_bytes.all.peak", "oversize_allocations.current"):
        assert stats[key] == 0
    assert porter_runtime.reset_accumulated_memory_stats() is None
    assert [porter_runtime.power_draw(), porter_runtime.utilization(), porter_runtime.temperature(),
            porter_runtime.clock_rate()] == [0, 0, 0, 0]
    assert "no CUDA caching allocator" in porter_runtime.memory_summary()


def test_mps_memory_stats_are_the_mps_counters(simulate, monkeypatch):
    machine = simulate("mps")
    machine.record(torch.mps, "current_allocated_memory", 300)
    machine.record(torch.mps, "driver_allocated_memory", 900)
    stats = porter_runtime.memory_stats()
    assert stats["allocated_bytes.all.current"] == stats["active_bytes.all.current"] == 300
    assert stats["reserved_bytes.all.current"] == 900 and stats["reserved_bytes.all.peak"] >= 900
    assert stats["active_bytes.all.peak"] >= 300 and stats["num_ooms"] == 0


def test_cpu_manual_seed_seeds_the_cpu_generator():
    porter_runtime.manual_seed(5)
    a = torch.rand(3)
    porter_runtime.manual_seed_all(5)
    assert torch.equal(a, torch.rand(3))


def test_cpu_rng_state_twins_are_the_cpu_generators_state(simulate):
    """Megatron-LM's tracker: save the state, seed, draw, restore; off CUDA the device
    generator is the CPU's, so the restore brings back the same numbers."""
    simulate("cpu")
    porter_runtime.manual_seed(11)
    saved = porter_runtime.get_rng_state()
    first = torch.rand(4)
    porter_runtime.set_rng_state(saved)
    assert torch.equal(first, torch.rand(4))
    states = porter_runtime.get_rng_state_all()
    assert len(states) == 1 and torch.equal(states[0], torch.get_rng_state())
    again = torch.rand(2)
    porter_runtime.set_rng_state_all(states)
    assert torch.equal(again, torch.rand(2))


def test_a_cuda_generators_state_is_not_restored_off_cuda_with_a_warning(simulate):
    """A checkpoint saved on CUDA holds Philox's 16-byte state; the CPU generator can't take it."""
    simulate("cpu")
    before = torch.get_rng_state()
    with pytest.warns(UserWarning, match="saved by another kind of device"):
        porter_runtime.set_rng_state(torch.zeros(16, dtype=torch.uint8))
    assert torch.equal(before, torch.get_rng_state())


def test_cpu_event_times_wall_clock():
    start, end = porter_runtime.Event(enable_timing=True), porter_runtime.Event(enable_timing=True)
    start.record()
    time.sleep(0.01)
    end.record()
    end.synchronize()
    assert start.query() and end.query()
    assert 5.0 < start.elapsed_time(end) < 5000.0
    with pytest.raises(RuntimeError, match="enable_timing"):
        porter_runtime.Event().elapsed_time(porter_runtime.Event())


def test_an_event_says_whether_it_was_recorded_as_cuda_event_does():
    """StyleGAN-XL's training loop: ``if phase.start_event.cuda_event == 0 and
    phase.end_event.cuda_event == 0: continue`` skips phases that never ran (its restart's
    regularisation phases); the twin lacked the handle (blind round 5, silent)."""
    start, end = porter_runtime.Event(enable_timing=True), porter_runtime.Event(enable_timing=True)
    assert start.cuda_event == 0 and end.cuda_event == 0
    start.record()
    end.record()
    assert start.cuda_event != 0 and end.cuda_event != 0


def test_nvtx_off_cuda_never_raises_and_records_profiler_ranges():
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        assert porter_runtime.nvtx_range_push("outer") == 0
        assert porter_runtime.nvtx_range_push("inner") == 1
        assert porter_runtime.nvtx_range_pop() == 1
        assert porter_runtime.nvtx_range_pop() == 0
        with porter_runtime.nvtx_range("ctx {}", 3):
            torch.ones(1) + 1

        @porter_runtime.nvtx_range("decorated")
        def work() -> int:
            return 4

        assert work() == 4 and work() == 4
    names = {e.name for e in prof.events()}
    assert {"outer", "inner", "ctx 3", "decorated"} <= names
    assert porter_runtime.nvtx_range_pop() == -1


def test_nvtx_on_cuda_uses_torch_cuda_nvtx(simulate):
    machine = simulate("cuda")
    push = machine.record(torch.cuda.nvtx, "range_push", 0)
    pop = machine.record(torch.cuda.nvtx, "range_pop", 0)
    porter_runtime.nvtx_range_push("step")
    porter_runtime.nvtx_range_pop()
    assert push.calls == [(("step",), {})] and pop.calls == [((), {})]


def test_nvtx_on_a_cuda_build_without_nvtx_falls_back(simulate):
    machine = simulate("cuda")

    def missing(*args, **kwargs):
        raise RuntimeError("NVTX functions not installed. Are you sure you have a CUDA build?")

    machine.record(torch.cuda.nvtx, "range_push", missing)
    machine.record(torch.cuda.nvtx, "range", missing)
    assert porter_runtime.nvtx_range_push("x") == 0
    assert porter_runtime.nvtx_range_pop() == 0
    with porter_runtime.nvtx_range("y"):
        pass


def test_nothing_raises_a_cuda_error_on_this_cpu():
    """Every public function, called for real on this CUDA-less machine."""
    calls = [
        lambda: porter_runtime.device(), lambda: porter_runtime.device(1),
        lambda: porter_runtime.device("cuda:1"), porter_runtime.synchronize,
        porter_runtime.empty_cache, lambda: porter_runtime.manual_seed(0),
        lambda: porter_runtime.manual_seed_all(0), porter_runtime.device_count,
        porter_runtime.current_device, lambda: porter_runtime.set_device(0),
        porter_runtime.device_name, porter_runtime.get_device_properties,
        porter_runtime.memory_allocated, porter_runtime.max_memory_allocated,
        porter_runtime.memory_reserved, porter_runtime.max_memory_reserved,
        porter_runtime.reset_peak_memory_stats, porter_runtime.mem_get_info,
        porter_runtime.is_bf16_supported, porter_runtime.Event, porter_runtime.map_location,
        porter_runtime.pin_memory, porter_runtime.pin_memory_device,
        lambda: porter_runtime.pin_tensor(torch.ones(1)), porter_runtime.dist_backend,
        lambda: porter_runtime.ddp_device_ids(0), lambda: porter_runtime.ddp_output_device(0),
        lambda: porter_runtime.barrier_device_ids([0]), porter_runtime.sdpa_kernel,
        lambda: porter_runtime.supported_dtype(torch.float64),
        lambda: porter_runtime.to_device({"x": torch.ones(1)}),
        lambda: porter_runtime.dataloader_kwargs(pin_memory=True, num_workers=0,
                                                 persistent_workers=True),
    ]
    for call in calls:
        call()


def test_fork_rng_on_cuda_is_torchs_with_the_callers_arguments(simulate):
    machine = simulate("cuda")
    recorder = machine.record(torch.random, "fork_rng", "forked")
    assert porter_runtime.fork_rng(devices=[1], enabled=False) == "forked"
    assert recorder.calls == [((), {"devices": [1], "enabled": False})]


def test_fork_rng_on_the_cpu_forks_the_cpu_generator_where_torch_raises():
    with pytest.raises(AssertionError, match="not compiled with CUDA"):
        with torch.random.fork_rng(devices=[0]):
            pass
    torch.manual_seed(3)
    with porter_runtime.fork_rng(devices=[porter_runtime.current_device()]):
        inside = torch.rand(3)
    torch.testing.assert_close(torch.rand(3), inside)  # the generator was restored


def test_fork_rng_on_mps_forks_the_mps_generator(simulate):
    machine = simulate("mps")
    recorder = machine.record(torch.random, "fork_rng", "forked")
    porter_runtime.fork_rng([0])
    porter_runtime.fork_rng(devices=[0], device_type="cpu")  # a type the caller chose is kept
    assert recorder.calls == [(([0],), {"device_type": "mps"}), ((), {"devices": [0], "device_type": "cpu"})]


def test_current_stream_is_cudas_on_cuda_and_the_default_queue_elsewhere(simulate):
    machine = simulate("cuda")
    recorder = machine.record(torch.cuda, "current_stream", "stream-1")
    assert porter_runtime.current_stream("cuda:1") == "stream-1"
    assert recorder.calls == [(("cuda:1",), {})]
    simulate("cpu")
    start, end = porter_runtime.Event(enable_timing=True), porter_runtime.Event(enable_timing=True)
    start.record(porter_runtime.current_stream(torch.device("cpu")))  # StyleGAN's training loop, ported
    end.record(stream=porter_runtime.current_stream())
    end.synchronize()
    assert start.elapsed_time(end) >= 0.0


def test_device_module_is_what_the_lookup_returned_on_cuda(simulate):
    simulate("cuda")
    for module in (torch.cuda, torch.cpu, torch.mps):
        assert porter_runtime.device_module(module) is module


def test_device_module_answers_cudas_functions_off_cuda():
    """torchtune's cleanup_before_training on a device module torch.cpu lacks them for."""
    module = porter_runtime.device_module(getattr(torch, "cpu"))
    assert not hasattr(torch.cpu, "empty_cache")
    assert module.empty_cache() is None and module.reset_peak_memory_stats() is None
    assert module.max_memory_allocated() == 0 and module.device_count() == 1
    with module.device(None):
        assert torch.ones(1).item() == 1.0
    assert module.is_available() is torch.cpu.is_available()  # any other name is the module's own
    assert porter_runtime.device_module(torch.cuda).synchronize() is None
    assert porter_runtime.device_module("npu") == "npu"  # not a torch device module: as it was


def test_device_modules_memory_submodule_answers_off_cuda():
    """Liger-Kernel's callback (blind round 10): `getattr(torch, device).memory.max_memory_allocated()`;
    torch.cpu and torch.mps have no `memory` submodule, torch.cuda's needs CUDA."""
    assert not hasattr(torch.cpu, "memory")
    for lookup in (torch.cpu, torch.cuda):
        memory = porter_runtime.device_module(lookup).memory
        assert memory.max_memory_allocated() == 0 and memory.reset_peak_memory_stats() is None
    assert porter_runtime.device_module(torch.cuda).memory.list_gpu_processes  # the submodule's own names stay


def test_mesh_device_type_is_the_value_on_cuda(simulate):
    simulate("cuda")
    for value in ("cuda", torch.device("cuda"), "cpu"):
        assert porter_runtime.mesh_device_type(value) is value


def test_mesh_device_type_resolves_a_cuda_value_off_cuda():
    assert porter_runtime.mesh_device_type("cuda") == "cpu"
    assert porter_runtime.mesh_device_type(torch.device("cuda")) == "cpu"
    for value in ("cpu", "meta", None):
        assert porter_runtime.mesh_device_type(value) == value


def test_streams_are_cudas_on_cuda_and_the_one_queue_elsewhere(simulate):
    machine = simulate("cuda")
    made = machine.record(torch.cuda, "Stream", "side")
    entered = machine.record(torch.cuda, "stream", "context")
    assert porter_runtime.Stream(priority=-1) == "side" and made.calls == [((None, -1), {})]
    assert porter_runtime.stream("side") == "context" and entered.calls == [(("side",), {})]
    simulate("cpu")
    side = porter_runtime.Stream(priority=-1)
    with porter_runtime.stream(side):
        x = torch.ones(2) * 3
    porter_runtime.current_stream().wait_stream(side)
    porter_runtime.record_stream(x, porter_runtime.current_stream())  # nothing to mark: one queue
    assert side.query() and side == porter_runtime.default_stream() and x.sum().item() == 6.0
    event = side.record_event()
    event.synchronize()
