"""porter_runtime.triton_stand_in: a Triton module's kernel definitions run where Triton
is missing, Triton's pure helpers compute, a launch names the kernel, and nothing
pretends Triton is installed."""

import importlib.util
import sys

import pytest

import porter_runtime
from porter_runtime.thirdparty.triton_stand_in import TritonMissing

triton = porter_runtime.triton_stand_in("triton")
tl = porter_runtime.triton_stand_in("triton.language")


def _configs():
    return [triton.Config({"BLOCK_N": b}, num_warps=w, num_stages=2) for b in (32, 64) for w in (2, 4)]


@triton.autotune(configs=_configs(), key=["N"])
@triton.heuristics({"HAS_BIAS": lambda args: args["B"] is not None})
@triton.jit
def _fused_fwd(X, B, Y, N, BLOCK_N: tl.constexpr, HAS_BIAS: tl.constexpr):
    pid = tl.program_id(0)
    tl.store(Y + pid, tl.load(X + pid))


@triton.jit(debug=True)
def _plain(X):
    pass


def test_definitions_run_and_keep_their_configs():
    assert len(_fused_fwd.configs) == 4
    assert _fused_fwd.configs[-1].num_warps == 4 and _fused_fwd.configs[-1].kwargs == {"BLOCK_N": 64}
    assert _fused_fwd.__name__ == "_fused_fwd" and _fused_fwd.fn.__name__ == "_fused_fwd"
    assert _plain.configs == []
    assert tl is triton.language


def test_pure_helpers_compute():
    assert triton.cdiv(10, 4) == 3 and triton.cdiv(8, 4) == 2
    assert [triton.next_power_of_2(n) for n in (0, 1, 2, 3, 33, 64)] == [1, 1, 2, 4, 64, 64]
    from packaging import version

    assert version.parse(triton.__version__) < version.parse("2.0")


def test_a_launch_names_the_kernel_and_where_it_is():
    with pytest.raises(TritonMissing, match=r"Triton kernel `_fused_fwd` \(.*test_rt_triton_stand_in.py:\d+\)"):
        _fused_fwd[(triton.cdiv(16, 8),)](1, None, 2, 16)
    with pytest.raises(TritonMissing, match="calling Triton kernel `_plain`"):
        _plain(1)


def test_computing_with_a_stand_in_says_why():
    stride = tl.cdiv_like(4)  # any other call gives a stand-in, which refuses to compute
    with pytest.raises(TritonMissing, match=r"`triton\.language\.cdiv_like\(\.\.\.\)`"):
        int(stride)
    with pytest.raises(TritonMissing):
        bool(tl.float32)


def test_a_query_of_the_machine_raises_at_once_so_the_modules_own_fallback_runs():
    def get_available_device():  # flash-linear-attention's fla/utils
        try:
            return triton.runtime.driver.active.get_current_target().backend
        except Exception:
            return "cpu"

    assert get_available_device() == "cpu"
    with pytest.raises(TritonMissing, match=r"`triton\.runtime\.driver\.active\.get_current_device\(\.\.\.\)`"):
        triton.runtime.driver.active.get_current_device()


def test_an_autotuner_subclass_built_around_a_kernel_is_that_kernel():
    class CachedAutotuner(triton.runtime.Autotuner):  # flash-linear-attention's fla/ops/utils/cache.py
        def __init__(self, fn, arg_names, configs, key, reset_to_zero, restore_value, **kwargs):
            super().__init__(fn, arg_names, configs, key, reset_to_zero, restore_value, **kwargs)

    def decorator(fn):
        return CachedAutotuner(fn, fn.arg_names, _configs(), ["N"], None, None, pre_hook=None)

    tuned = decorator(_plain)
    assert _plain.arg_names == ["X"] and tuned.__name__ == "_plain" and len(tuned.configs) == 4
    with pytest.raises(TritonMissing, match="launching Triton kernel `_plain`"):
        tuned[(1,)](1)


def test_subclassing_and_introspection_work():
    class Hook(triton.runtime.KernelInterface):  # a module-level class over Triton's base
        pass

    assert Hook.__mro__[-1] is object and Hook().fn is None
    assert not hasattr(tl, "__code__") and hasattr(tl, "make_tensor_descriptor")
    assert "not installed" in repr(tl)


def test_nothing_pretends_triton_is_installed():
    assert "triton" not in sys.modules or not isinstance(sys.modules["triton"], type(triton))
    if "triton" not in sys.modules:
        assert importlib.util.find_spec("triton") is None
    with pytest.raises(ValueError):
        porter_runtime.triton_stand_in("numpy")
