"""torch.distributed choices: NCCL and device ids on CUDA, Gloo and None elsewhere."""
from __future__ import annotations

from typing import Any, Optional, TypeVar

import torch

from . import _compat, _device, _gloo_teardown, _log

T = TypeVar("T")


def dist_backend(requested: Optional[str] = None) -> str:
    """The process-group backend.

    CUDA: ``requested``, or "nccl" when None. MPS / CPU: "gloo" in place of any
    NCCL request (including "cpu:gloo,cuda:nccl" forms and None), because only
    Gloo is built there; other backends ("gloo", "mpi") are kept.
    """
    if _device.is_cuda():
        return requested or "nccl"
    if requested is None or "nccl" in requested:
        return "gloo"
    return requested


def _world_size(kwargs: dict[str, Any]) -> int:
    size = kwargs.get("world_size", -1)
    return int(size) if size not in (None, -1) else _compat.launch_world_size()


def check_launch(world_size: int) -> None:
    """Refuse a multi-process launch on MPS with a clear message (facts §7)."""
    if world_size > 1 and _device.device_type() == "mps":
        raise RuntimeError(
            f"porter_runtime: a {world_size}-process launch resolved to mps, but Gloo (the "
            "only backend on macOS) cannot communicate MPS tensors and a Mac has one GPU. "
            "Run a single process, or set PORTER_DEVICE=cpu to train multi-process on CPU.")


def init_process_group(backend: Optional[str] = None, **kwargs: Any) -> None:
    """Twin of torch.distributed.init_process_group with the backend chosen per device.

    CUDA: forwarded unchanged (backend None stays None, as in the original).
    MPS / CPU: backend from dist_backend(); on a Mac the device resolves to the CPU
    from here on (_device.note_process_group: Gloo cannot communicate MPS tensors),
    and a multi-process launch that PORTER_DEVICE=mps keeps on MPS raises;
    ``device_id`` (which binds the group to a CUDA device, and which torch refuses for a
    CPU device: "device_id parameter must be an accelerator with an index") is dropped,
    with one info line. A Gloo group is also held until the interpreter exits
    (_gloo_teardown says why).
    """
    import torch.distributed as dist  # deferred: importing it is not free

    _device.note_process_group()  # on a Mac, the CPU from now on (Gloo has no MPS tensors)
    if _device.is_cuda():
        dist.init_process_group(backend=backend, **kwargs)
        return
    check_launch(_world_size(kwargs))
    if kwargs.get("device_id") is not None:
        _log.info_once("init_process_group.device_id",
                       f"init_process_group: device_id={kwargs['device_id']} binds a group to a CUDA device; "
                       "left out here")
        kwargs = {k: v for k, v in kwargs.items() if k != "device_id"}
    chosen = dist_backend(backend)
    dist.init_process_group(backend=chosen, **kwargs)
    if chosen == "gloo":
        _gloo_teardown.keep_until_exit(dist.group.WORLD)


def ddp_device_ids(local_rank: int) -> Optional[list[int]]:
    """DDP ``device_ids``: ``[local_rank]`` on CUDA, None elsewhere (DDP rejects
    device ids for CPU modules, facts §7)."""
    return [local_rank] if _device.is_cuda() else None


def data_parallel(module: Any, inputs: Any, device_ids: Any = None, output_device: Any = None, dim: int = 0,
                  module_kwargs: Any = None) -> Any:
    """``torch.nn.parallel.data_parallel(module, inputs, ...)``, the function: torch's own
    on CUDA. Elsewhere ``module(*inputs, **module_kwargs)``, which is what the
    ``nn.DataParallel`` class does without a GPU; torch's function raises there ("device
    type could not be determined" on a CPU; BigGAN's sampling during training)."""
    if _device.is_cuda():
        from torch.nn.parallel import data_parallel as torch_data_parallel
        return torch_data_parallel(module, inputs, device_ids, output_device, dim, module_kwargs)
    if not isinstance(inputs, tuple):
        inputs = (inputs,) if inputs is not None else ()
    return module(*inputs, **(module_kwargs or {}))


def convert_sync_batchnorm(module: Any, process_group: Any = None) -> Any:
    """``nn.SyncBatchNorm.convert_sync_batchnorm(module, process_group)``: torch's own on
    CUDA. Elsewhere ``module`` as it is, each process keeping its own BatchNorm statistics:
    torch's SyncBatchNorm refuses tensors off CUDA in a process group ("expected input tensor
    to be on GPU"), and DDP refuses a CPU model holding one (SwAV's pretraining)."""
    if _device.is_cuda():
        return torch.nn.SyncBatchNorm.convert_sync_batchnorm(module, process_group)
    _log.info_once("sync_batchnorm", "SyncBatchNorm needs CUDA: each process keeps its own BatchNorm "
                   "statistics here")
    return module


class _LocalSyncBatchNorm(torch.nn.SyncBatchNorm):
    """A SyncBatchNorm that normalises with this process's batch: BatchNorm's forward, for
    the inputs of any rank SyncBatchNorm takes."""

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return torch.nn.modules.batchnorm._BatchNorm.forward(self, input)


def SyncBatchNorm(*args: Any, **kwargs: Any) -> torch.nn.SyncBatchNorm:  # noqa: N802 (torch's class name)
    """``nn.SyncBatchNorm(...)``: torch's on CUDA; elsewhere a SyncBatchNorm (same
    parameters, buffers and state-dict keys) that does not synchronise, as
    ``convert_sync_batchnorm`` leaves BatchNorm there."""
    if _device.is_cuda():
        return torch.nn.SyncBatchNorm(*args, **kwargs)
    _log.info_once("sync_batchnorm", "SyncBatchNorm needs CUDA: each process keeps its own BatchNorm "
                   "statistics here")
    return _LocalSyncBatchNorm(*args, **kwargs)


def ddp_output_device(x: T) -> Optional[T]:
    """DDP ``output_device``: ``x`` on CUDA, None elsewhere."""
    return x if _device.is_cuda() else None


def barrier_device_ids(ids: T) -> Optional[T]:
    """``dist.barrier(device_ids=...)``: ``ids`` on CUDA, None elsewhere (NCCL only)."""
    return ids if _device.is_cuda() else None


def mesh_device_type(value: T) -> T:
    """The device type of ``init_device_mesh(value, ...)`` / ``DeviceMesh(value, ...)`` given
    as a value (torchtune's ``cfg.device``, a parameter): ``value`` on CUDA; elsewhere a
    value naming CUDA (``"cuda"``, ``torch.device("cuda")``) is the resolved device's type,
    as a literal ``"cuda"`` there becomes ``device_type()``, and any other value is kept."""
    if _device.is_cuda():
        return value
    named = value.type if isinstance(value, torch.device) else value
    if isinstance(named, str) and named.split(":")[0] == "cuda":
        return _device.device_type()  # type: ignore[return-value]
    return value


def is_multiprocess_launch() -> bool:
    """True when a launcher (torchrun, ``torch.distributed.run``) started this process
    as one of several: ``WORLD_SIZE`` is above 1. Lets a CPU or MPS run that a
    launcher started set up its process group where the original required CUDA."""
    return _compat.launch_world_size() > 1


def fsdp_sync_module_states(module: Any, sync: bool) -> bool:
    """FSDP ``sync_module_states``: ``sync`` on CUDA, where FSDP broadcasts rank 0's
    parameters and buffers itself. Elsewhere FSDP refuses CPU tensors for that
    broadcast, so the runtime makes it here (over the process group, from rank 0)
    and returns False: FSDP then starts from the same states as on CUDA."""
    if _device.is_cuda() or not sync:
        return sync
    import torch.distributed as dist  # deferred: importing it is not free

    if dist.is_available() and dist.is_initialized():
        for tensor in [*module.parameters(), *module.buffers()]:
            dist.broadcast(tensor.data, src=0)
    return False


def fsdp_syncing(fsdp: T) -> T:
    """``FullyShardedDataParallel`` as ``functools.partial(FSDP, sync_module_states=True,
    ...)`` binds it, before the module is known: on CUDA ``fsdp`` itself. Elsewhere a
    function that calls ``fsdp`` with the same arguments, its ``sync_module_states``
    passed through ``fsdp_sync_module_states`` with the module it is then called with
    (rank 0's states broadcast here, then False)."""
    if _device.is_cuda():
        return fsdp

    def syncing(*args: Any, **kwargs: Any) -> Any:
        module = args[0] if args else kwargs.get("module")
        if module is not None and kwargs.get("sync_module_states"):
            kwargs["sync_module_states"] = fsdp_sync_module_states(module, kwargs["sync_module_states"])
        return fsdp(*args, **kwargs)  # type: ignore[operator]

    syncing.__wrapped__ = fsdp  # type: ignore[attr-defined]
    return syncing  # type: ignore[return-value]


_SHARDED_ARGS = ("device", "init_scale", "backoff_factor", "growth_factor", "growth_interval",
                 "enabled", "process_group")


def ShardedGradScaler(*args: Any, **kwargs: Any) -> Any:
    """Twin of FSDP's ``ShardedGradScaler(...)`` (device "cuda" by default).

    CUDA: the same class with the caller's arguments. Elsewhere it follows the
    runtime's autocast as ``porter_runtime.GradScaler`` does: on the resolved
    device, disabled where autocast uses bfloat16 in place of float16, and then
    answering state_dict() and the getters as an enabled one (``_amp.KeptState``).
    """
    from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler as Sharded

    from . import _amp

    options = dict(zip(_SHARDED_ARGS, args), **kwargs)
    kind = _device.device_type()
    if kind == "cuda":
        return Sharded(**options)
    options["device"] = kind
    if _amp.disabled_by_runtime(options):
        kept = _amp.kept_state(Sharded)
        return kept(**options).keep_state(options)
    return Sharded(**options)


def collective_input(tensor: T) -> T:
    """The input of ``all_gather_into_tensor``: ``tensor`` on CUDA. Elsewhere (Gloo)
    detached: Gloo splits the output into views and copies into them, which raises
    "A view was created in no_grad mode and is being modified inplace with grad mode
    enabled" for an input that requires grad (torch 2.13; on some calls and not
    others, a race with Gloo's worker thread). c10d collectives are not
    differentiable on any backend, so the gathered values are the same."""
    if _device.is_cuda() or not hasattr(tensor, "detach"):
        return tensor
    return tensor.detach()  # type: ignore[attr-defined, no-any-return]


def work_future(work: Any, *outputs: Any) -> Any:
    """``work.get_future()`` of an async collective. Gloo has none for
    ``reduce_scatter`` ("Work::getFuture not implemented"): there the runtime waits for
    the work and returns a completed future holding ``[outputs...]``, the value NCCL's
    future gives. On CUDA, and wherever the backend has one, ``work.get_future()``."""
    try:
        return work.get_future()
    except RuntimeError as error:
        if _device.is_cuda() or "getFuture not implemented" not in str(error):
            raise
    import torch

    work.wait()
    done: Any = torch.futures.Future()
    done.set_result(list(outputs))
    return done
