"""Hugging Face options that only CUDA honours, chosen where the code runs.

Each helper returns the caller's value unchanged on CUDA (where the original ran), so
a ported ``from_pretrained(...)`` / ``TrainingArguments(...)`` means the same there.
"""
from __future__ import annotations

import copyreg
import dataclasses
import functools
import json
import os
import sys

from typing import Any, Optional, TypeVar

import torch

from .. import _device, _gloo_teardown, _log, _master
from . import libs as _thirdparty_libs

T = TypeVar("T")

#: attn_implementation values that need the flash_attn package (and CUDA).
#: TrainingArguments.optim values that are bitsandbytes' AdamW (paged or 8-bit)
_BNB_ADAMW = frozenset({"paged_adamw_32bit", "paged_adamw_8bit", "adamw_bnb_8bit", "adamw_8bit"})
_FLASH = frozenset({"flash_attention_2", "flash_attention_3"})
_MODULE = {"flash_attention_2": "flash_attn", "flash_attention_3": "flash_attn_interface"}


def attn_implementation(name: str) -> str:
    """``name`` on CUDA where its package imports (``flash_attention_2`` needs flash_attn,
    ``flash_attention_3`` flash_attn_interface); ``"sdpa"`` for those elsewhere, since
    transformers refuses flash attention without them. Other names are returned as given."""
    if name not in _FLASH:
        return name
    return name if _thirdparty_libs.cuda_attr(_MODULE[name], "__name__") is not None else "sdpa"


def quantized_load(value: T, option: str = "load_in_8bit") -> Any:
    """``from_pretrained(..., load_in_8bit=...)`` / ``load_in_4bit=``: ``value`` on CUDA,
    where bitsandbytes quantises the weights as the original asked. Elsewhere there are
    no bitsandbytes kernels (transformers stops: "Using `bitsandbytes` 8-bit quantization
    requires ..."), so it is False and the same weights load unquantised, in the
    ``torch_dtype`` the call gives, with a one-time warning: they take 2 (8-bit) or 4
    (4-bit) times the memory."""
    if _device.is_cuda() or not value:
        return value
    bits = 4 if "4bit" in option else 8
    _log.warn_once(f"quantized_load.{option}", f"from_pretrained({option}={value!r}): bitsandbytes' {bits}-bit "
                   f"quantisation runs CUDA kernels only; loading the weights unquantised on "
                   f"{_device.device_type()} (about {16 // bits}x the memory of the {bits}-bit load in float16)")
    return False


def _asks_bf16(args: Any) -> bool:
    """``bf16=True``, or TRL's ``bf16=None``, which its configs' ``__post_init__`` turns
    into ``not fp16`` (True by default: ORPOConfig, SFTConfig)."""
    bf16 = getattr(args, "bf16", False)
    return bool(bf16) or (bf16 is None and not getattr(args, "fp16", False))


def _bf16_accepted() -> bool:
    """Whether transformers' own check lets ``bf16=True`` through on this machine (it has
    no MPS branch up to 4.5x: "Your setup doesn't support bf16/gpu")."""
    try:
        from transformers.utils import is_torch_bf16_gpu_available
    except ImportError:
        return True
    try:
        return bool(is_torch_bf16_gpu_available())
    except Exception:  # noqa: BLE001  (a check that can't answer is not a reason to change the run)
        return True


#: transformers' own refusal of ``fp16`` without CUDA, NPU or XPU (up to 4.3x; later ones allow it)
_FP16_REFUSAL = b"FP16 Mixed precision training with AMP or APEX"


def _fp16_refused() -> bool:
    """Whether the installed transformers refuses ``fp16=True`` off CUDA: its
    ``training_args`` module holds the check's message (read once, not imported)."""
    global _FP16_REFUSED
    if _FP16_REFUSED is None:
        try:
            import importlib.util
            spec = importlib.util.find_spec("transformers.training_args")
            with open(spec.origin, "rb") as source:  # type: ignore[union-attr, arg-type]
                _FP16_REFUSED = _FP16_REFUSAL in source.read()
        except (ImportError, AttributeError, TypeError, ValueError, OSError):
            _FP16_REFUSED = False
    return _FP16_REFUSED


_FP16_REFUSED: Optional[bool] = None


def _fp16_off_cuda(args: Any) -> None:
    """``fp16=True`` (or ``fp16_full_eval``) where transformers refuses it off CUDA: bf16
    instead, where transformers takes bf16 on this device (the CPU; MPS where its check
    allows), else float32; a warning says which. Mixed precision stays on, and a
    repository that asserts one of fp16 and bf16 (Firefly's train.py) still finds one."""
    for fp16, bf16 in (("fp16", "bf16"), ("fp16_full_eval", "bf16_full_eval")):
        if not getattr(args, fp16, False):
            continue
        setattr(args, fp16, False)
        if _device.device_type() == "cpu" or _bf16_accepted():
            setattr(args, bf16, True)
            _log.warn_once(f"training_arguments.{fp16}", f"TrainingArguments: {fp16}=True needs a CUDA GPU in this "
                           f"transformers; using {bf16}=True (bfloat16 mixed precision) on "
                           f"{_device.device_type()} instead")
        else:
            _log.warn_once(f"training_arguments.{fp16}", f"TrainingArguments: {fp16}=True needs a CUDA GPU in this "
                           "transformers, and so does bf16 here; training in float32")


def cuda_option(value: T) -> Optional[T]:
    """``value`` on CUDA; None (the option's default: not set) elsewhere. For options
    that only mean something on CUDA and make transformers refuse to start without it,
    such as ``TrainingArguments(tf32=True)``."""
    return value if _device.is_cuda() else None


def training_arguments(args: Any) -> None:
    """Called first in a repository's ``TrainingArguments`` subclass's ``__post_init__``,
    before transformers checks the fields it was given on the command line. On CUDA it
    does nothing. Elsewhere bitsandbytes' AdamW (``optim="paged_adamw_32bit"``, a
    class default in QLoRA-style scripts; the 8-bit ones) becomes ``"adamw_torch"``
    with a warning, as ``porter_runtime.bnb_optim`` does (bitsandbytes' kernels are
    CUDA's: Trainer fails building the optimizer); where the runtime resolved to the CPU
    (on a Mac, a process-group launch: Gloo cannot send MPS tensors) ``use_cpu`` is set,
    so Trainer does not put the model on MPS; the Gloo group accelerate makes is destroyed
    at exit if the script left it (``_gloo_teardown``: otherwise about one exit in three
    ends in SIGABRT); ``tf32`` is unset (transformers raises "--tf32 requires
    Ampere or a newer GPU arch" without a CUDA GPU), and an FSDP run does not sync module
    states: accelerate's plugin looks for a CUDA, XPU or NPU device for that broadcast
    ("no available devices found"), and every rank loads the same weights anyway;
    ``deepspeed`` (a ZeRO config) is unset with a warning: DeepSpeed has no MPS support and
    accelerate's DeepSpeed path fails on the CPU, so Trainer trains without ZeRO, and its
    optimizer steps float32 copies of the half-precision parameters it trains, as ZeRO's
    master weights do (:func:`_master_weights`; ``fp16``, which Trainer's AMP refuses on
    float16 parameters, asks the same for them);
    ``use_liger_kernel`` (open-r1's SFT configs) is unset with a warning: Liger's fused
    layers are Triton kernels, and the model's own layers compute the same loss. On the CPU
    accelerate is told its device is plain ``"cpu"`` (``ACCELERATE_TORCH_DEVICE``; its
    multi-CPU ``"cpu:<rank>"`` breaks Trainer's resume in ``torch.load``); on MPS ``bf16``
    is unset with a warning where transformers' own check would refuse it there; ``fp16``,
    which transformers before 4.4x refuses off CUDA, becomes ``bf16`` where that is taken
    (:func:`_fp16_off_cuda`)."""
    if _device.is_cuda():
        return
    optim = getattr(args, "optim", None)
    name = getattr(optim, "value", optim)  # a string, or transformers' OptimizerNames
    if isinstance(name, str) and name in _BNB_ADAMW:
        _log.warn_once("training_arguments.optim", f"TrainingArguments: optim={name} is bitsandbytes' CUDA "
                       "optimizer; using optim=adamw_torch (the same AdamW update, 32-bit state kept in memory)")
        args.optim = "adamw_torch"
    _gloo_teardown.release_gloo_at_exit()  # accelerate's Gloo group, which Trainer code never destroys
    if (getattr(args, "fp16", False) or getattr(args, "fp16_full_eval", False)) and _fp16_refused():
        if getattr(args, "fp16", False):
            # on CUDA, Trainer's fp16 AMP refuses float16 parameters ("Attempting to unscale FP16
            # gradients"): such a run trained them through DeepSpeed's float32 master weights
            _master_weights(args, (torch.float16,))
        _fp16_off_cuda(args)
    if _device.device_type() == "cpu":
        # accelerate's multi-CPU state names its device "cpu:<rank>", which Trainer's resume
        # then hands torch.load as map_location ("don't know how to restore data location ...
        # tagged with cpu:0": FastChat, alignment-handbook); a plain "cpu" loads
        os.environ.setdefault("ACCELERATE_TORCH_DEVICE", "cpu")
        if getattr(args, "use_cpu", None) is False:
            # transformers picks MPS where it is; porter_runtime resolved to the CPU (on a Mac: a
            # process-group launch, Gloo cannot send MPS tensors), so Trainer runs there too
            args.use_cpu = True
    elif _device.device_type() == "mps" and _asks_bf16(args) and not _bf16_accepted():
        _log.warn_once("training_arguments.bf16", "TrainingArguments: bf16=True needs a CUDA GPU in this "
                       "transformers (its bf16 check has no MPS branch); training in float32 here")
        args.bf16 = False
    if getattr(args, "tf32", None):
        _log.info_once("training_arguments.tf32", f"TrainingArguments: tf32={args.tf32} is for CUDA GPUs; left unset")
        args.tf32 = None
    if getattr(args, "deepspeed", None):
        _log.warn_once("training_arguments.deepspeed", f"TrainingArguments: deepspeed={args.deepspeed!r} is for "
                       "CUDA GPUs (DeepSpeed does not support MPS, and accelerate's DeepSpeed path fails on the "
                       "CPU); left unset: Trainer trains without ZeRO (a launch of several processes is plain DDP)")
        args.deepspeed = None
        _master_weights(args, (torch.float16, torch.bfloat16))  # what ZeRO's fp16 / bf16 optimizers keep
    if getattr(args, "use_liger_kernel", False):
        _log.warn_once("training_arguments.liger", "TrainingArguments: use_liger_kernel=True asks for Liger's "
                       "Triton kernels, which need a CUDA GPU (Trainer raises where liger-kernel can't be "
                       "installed); left unset: the model's own layers compute the same loss, unfused")
        args.use_liger_kernel = False
    if getattr(args, "fsdp", None):
        config = _fsdp_config(getattr(args, "fsdp_config", None))
        if config is not None:
            config.pop("fsdp_sync_module_states", None)  # transformers strips "fsdp_" after: it would win
            args.fsdp_config = {**config, "sync_module_states": "false"}
            _log.info_once("training_arguments.fsdp", "TrainingArguments: FSDP does not sync module states here "
                           "(no CUDA device for the broadcast); every rank loads the same weights")


def _master_weights(args: Any, dtypes: tuple) -> None:
    """Off CUDA, where the run would have trained half-precision parameters through
    float32 master weights (DeepSpeed's, which the runtime takes out): Trainer's optimizer
    steps float32 copies of its trainable parameters of ``dtypes`` instead
    (:func:`porter_runtime._master.keep_float32_master`), so a model loaded in float16
    (``--torch_dtype float16``) does not turn NaN at its first AdamW step. Only a Trainer
    the script has imported (``transformers.trainer``) is hooked, and only for these arguments."""
    kept = tuple(getattr(args, "_porter_master_dtypes", ()))
    object.__setattr__(args, "_porter_master_dtypes", kept + tuple(d for d in dtypes if d not in kept))
    trainer = getattr(sys.modules.get("transformers.trainer"), "Trainer", None)
    create = getattr(trainer, "create_optimizer_and_scheduler", None)
    if create is None or getattr(create, "_porter_master", False):
        return

    @functools.wraps(create)
    def create_optimizer_and_scheduler(self: Any, *a: Any, **kw: Any) -> Any:
        result = create(self, *a, **kw)
        dtypes = getattr(getattr(self, "args", None), "_porter_master_dtypes", ())
        optimizer = getattr(self, "optimizer", None)
        optimizer = getattr(optimizer, "optimizer", optimizer)  # accelerate's AcceleratedOptimizer wraps it
        if dtypes and optimizer is not None:
            count = _master.keep_float32_master(optimizer, dtypes)
            if count:
                _log.warn_once("training_arguments.master", f"Trainer: {count} trainable parameters are "
                               f"{'/'.join(str(d).replace('torch.', '') for d in dtypes)}; the optimizer steps float32 "
                               "copies of them and writes them back, as DeepSpeed's master weights do on CUDA "
                               "(AdamW on float16 parameters turns them NaN)")
        return result

    create_optimizer_and_scheduler._porter_master = True  # type: ignore[attr-defined]
    trainer.create_optimizer_and_scheduler = create_optimizer_and_scheduler


def _fsdp_config(config: Any) -> Optional[dict]:
    """``TrainingArguments.fsdp_config`` as a dict: ``{}`` for None, a copy of a dict, the
    JSON file a path names (``--fsdp_config fsdp_config.json``, which transformers would
    read next); None for what can't be read, left for transformers to judge."""
    if config is None:
        return {}
    if isinstance(config, dict):
        return dict(config)
    if isinstance(config, (str, os.PathLike)) and os.path.isfile(config):
        try:
            with open(config, encoding="utf-8") as handle:
                loaded = json.load(handle)
        except (OSError, ValueError):
            return None
        return loaded if isinstance(loaded, dict) else None
    return None


#: transformers' / TRL's argument classes -> the same class, with the runtime asked first
_HOOKED: dict = {}


def training_arguments_class(cls: T) -> T:
    """``HfArgumentParser((ModelArguments, TrainingArguments))`` / ``TrlParser(...)`` with
    transformers' or TRL's own argument class: on CUDA ``cls`` itself, so the original runs
    as it was. Elsewhere a dataclass subclass of ``cls``, with the same name and fields, whose
    ``__post_init__`` calls :func:`training_arguments` before transformers checks the options
    the command line gave (``--tf32 True``, ``--fsdp_config fsdp.json``, ``--bf16`` on MPS),
    as a repository's own subclass does once TP708 ports it. Trainer takes it as ``cls``, and
    it pickles as ``cls`` (Trainer's ``training_args.bin`` loads where porter_runtime is not)."""
    if _device.is_cuda() or not isinstance(cls, type) or not dataclasses.is_dataclass(cls):
        return cls
    hooked = _HOOKED.get(cls)
    if hooked is None:
        base: Any = cls

        def __post_init__(self: Any) -> None:
            training_arguments(self)
            base.__post_init__(self)

        def __reduce_ex__(self: Any, protocol: Any) -> Any:
            # what pickle's protocols 0 and 1 write for a plain object, with the parent's class
            return copyreg._reconstructor, (base, object, None), dict(self.__dict__)  # type: ignore[attr-defined]

        # no @dataclass again: the parent's fields, __init__ (which calls __post_init__) and __repr__ hold
        namespace = {"__post_init__": __post_init__, "__reduce_ex__": __reduce_ex__, "__module__": cls.__module__,
                     "__qualname__": cls.__qualname__, "__doc__": cls.__doc__}
        hooked = _HOOKED[cls] = type(cls.__name__, (cls,), namespace)
    return hooked  # type: ignore[return-value]
