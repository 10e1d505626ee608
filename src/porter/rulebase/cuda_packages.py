"""The one table of CUDA-only packages: import names, distributions, compiled modules, advice.

Every part of porter that needs to know whether a package runs without CUDA reads it
here: the rules (which imports to report, which guards keep a Mac out), the import
clean-up (which dead imports to drop), the dependency-manifest rules (which
requirements to make platform-conditional) and the ledger (which imports are CUDA
touchpoints). A new package is one new :class:`CudaPackage` row.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional


@dataclass(frozen=True)
class CudaPackage:
    """One CUDA-only package (or a CUDA-only part of a portable one, ``numba.cuda``)."""

    #: Import names, dotted where only a submodule is CUDA-only (``numba.cuda``).
    imports: tuple[str, ...]
    #: Distribution names on PyPI, PEP 503 normalised; empty when the distribution
    #: installs everywhere and only its CUDA part fails (numba, nvidia-ml-py).
    distributions: tuple[str, ...]
    #: What to use off CUDA.
    advice: str
    #: Compiled extension modules the package builds, imported by their own name.
    compiled: tuple[str, ...] = ()


#: What replaces a Gaussian-splatting rasteriser (diff_gaussian_rasterization and its forks).
_SPLATTING = "a PyTorch Gaussian-splatting rasteriser (gsplat's torch path) off CUDA"

PACKAGES: tuple[CudaPackage, ...] = (
    CudaPackage(("flash_attn",), ("flash-attn",),
                "porter_runtime.attention (flash_attn's Python API on torch's scaled_dot_product_attention)",
                ("flash_attn_2_cuda", "flash_attn_cuda", "rotary_emb", "dropout_layer_norm",
                 "fused_dense_lib", "xentropy_cuda_lib", "fused_softmax_lib", "ft_attention")),
    CudaPackage(("flash_attn_interface",), ("flash-attn-3",),
                "FlashAttention-3 (Hopper only): torch.nn.functional.scaled_dot_product_attention off CUDA",
                ("flash_attn_3_cuda", "flash_attn_3")),
    CudaPackage(("flashinfer",), ("flashinfer-python",),
                "torch.nn.functional.scaled_dot_product_attention"),
    CudaPackage(("block_sparse_attn",), ("block-sparse-attn",),
                "torch.nn.functional.scaled_dot_product_attention with the block mask as attn_mask "
                "(Block-Sparse-Attention builds flash-attn's CUDA kernels only)",
                ("block_sparse_attn_cuda",)),
    CudaPackage(("xformers",), ("xformers",),
                "torch.nn.functional.scaled_dot_product_attention (memory_efficient_attention's semantics)"),
    CudaPackage(("apex",), ("apex",),
                "torch.nn.LayerNorm / RMSNorm, torch.optim.AdamW(fused=False), torch.amp, "
                "torch.nn.SyncBatchNorm, DistributedDataParallel instead of apex",
                ("amp_C", "fused_layer_norm_cuda", "fused_adam_cuda", "syncbn", "apex_C",
                 "fused_weight_gradient_mlp_cuda", "scaled_masked_softmax_cuda",
                 "scaled_upper_triang_masked_softmax_cuda", "fused_rotary_positional_embedding",
                 "fast_layer_norm", "fused_dense_cuda")),
    CudaPackage(("bitsandbytes",), ("bitsandbytes",),
                "torch.optim.AdamW for bnb.optim.*8bit; full-precision weights for load_in_4bit/8bit"),
    CudaPackage(("adam_atan2",), ("adam-atan2",), "porter_runtime.AdamATan2 (the same update in PyTorch)",
                ("adam_atan2_backend",)),
    CudaPackage(("triton",), ("triton",),
                "guard `import triton` with try/except ImportError and use a PyTorch path off CUDA"),
    CudaPackage(("tilelang",), ("tilelang",),
                "guard `import tilelang` with try/except ImportError and call the PyTorch reference off CUDA "
                "(tilelang JIT-compiles its @tilelang.jit kernels for NVIDIA and AMD GPUs only)"),
    CudaPackage(("cutlass",), ("nvidia-cutlass-dsl", "nvidia-cutlass"),
                "guard the CuTe DSL import (`import cutlass`, `cutlass.cute`) and call the PyTorch reference "
                "off CUDA: @cute.kernel compiles for NVIDIA GPUs only"),
    CudaPackage(("quack",), ("quack-kernels",),
                "the PyTorch op the kernel fuses (quack's kernels are CuTe DSL, NVIDIA Hopper/Blackwell only)"),
    CudaPackage(("deepspeed",), ("deepspeed",),
                "run the plain PyTorch loop off CUDA (torch.optim optimizer, loss.backward(), "
                "optimizer.step()) instead of deepspeed.initialize / the engine"),
    CudaPackage(("mamba_ssm",), ("mamba-ssm",),
                "mamba_ssm's own reference path is PyTorch: selective_scan_ref / "
                "mamba_inner_ref (mamba_ssm.ops.selective_scan_interface) and Mamba(..., "
                "use_fast_path=False); copy them into the repository",
                ("selective_scan_cuda",)),
    CudaPackage(("causal_conv1d",), ("causal-conv1d",),
                "causal_conv1d_fn(x, w, b, activation) == act(F.conv1d(x, w.unsqueeze(1), b, "
                "padding=w.shape[-1] - 1, groups=x.shape[1])[..., :x.shape[-1]])",
                ("causal_conv1d_cuda",)),
    CudaPackage(("liger_kernel",), ("liger-kernel",),
                "skip apply_liger_kernel_to_*() off CUDA: the Hugging Face modules it patches "
                "are the PyTorch reference"),
    CudaPackage(("transformer_engine",), ("transformer-engine", "transformer-engine-torch"),
                "torch.nn.Linear / LayerNorm in bfloat16 off CUDA (no FP8 there)",
                ("transformer_engine_torch",)),
    CudaPackage(("vllm",), ("vllm",), "Hugging Face transformers' generate() off CUDA"),
    CudaPackage(("lmdeploy",), ("lmdeploy",),
                "Hugging Face transformers' generate() off CUDA (lmdeploy's wheels are CUDA TurboMind builds)"),
    # Mixture-of-experts and attention kernels (nanotron's grouped_gemm raised at import).
    CudaPackage(("grouped_gemm",), ("grouped-gemm",),
                "a loop of torch.matmul over the experts (or torch._grouped_mm where torch has it) off CUDA"),
    CudaPackage(("megablocks",), ("megablocks",),
                "a dense or per-expert-loop mixture of experts in PyTorch off CUDA"),
    CudaPackage(("stk",), ("stanford-stk",), "dense torch matmuls with the block mask applied off CUDA"),
    CudaPackage(("deep_gemm",), (), "torch.matmul in bfloat16 off CUDA (no FP8 GEMM there)"),
    CudaPackage(("sageattention",), ("sageattention",),
                "torch.nn.functional.scaled_dot_product_attention off CUDA"),
    CudaPackage(("ring_flash_attn",), ("ring-flash-attn",),
                "scaled_dot_product_attention on the whole sequence off CUDA (one process, no ring)"),
    # Graphics and 3-D kernels.
    CudaPackage(("tinycudann",), (), "a torch.nn MLP and a PyTorch hash-grid encoding off CUDA"),
    CudaPackage(("nvdiffrast",), ("nvdiffrast",), "a PyTorch rasteriser (pytorch3d's) off CUDA"),
    CudaPackage(("diff_gaussian_rasterization",), (), _SPLATTING),
    CudaPackage(("simple_knn",), (),
                "distCUDA2(points) is each point's mean squared distance to its 3 nearest neighbours: "
                "torch.cdist(points, points).topk(4, largest=False).values[:, 1:].pow(2).mean(-1) "
                "(in chunks of points for a large cloud) off CUDA"),
    CudaPackage(("auto_gptq",), ("auto-gptq",), "load the unquantised model off CUDA"),
    CudaPackage(("exllamav2",), ("exllamav2",), "load the unquantised model off CUDA"),
    CudaPackage((), ("tensorflow-gpu",),  # imported as tensorflow, which installs anywhere
                "the `tensorflow` distribution (CPU; tensorflow-metal for a Mac GPU): tensorflow-gpu has "
                "no macOS wheels and stopped at 2.11"),
    CudaPackage((), ("onnxruntime-gpu",),  # imported as onnxruntime, which installs anywhere
               
                "the `onnxruntime` distribution (CPU, CoreML providers) on macOS"),
    # Beyond deep-learning kernels.
    CudaPackage(("cudf",), ("cudf", "cudf-cu11", "cudf-cu12"), "pandas (cudf mirrors its API)"),
    CudaPackage(("cuml",), ("cuml", "cuml-cu11", "cuml-cu12"), "scikit-learn (cuml mirrors its API)"),
    CudaPackage(("cugraph",), ("cugraph", "cugraph-cu11", "cugraph-cu12"), "networkx"),
    CudaPackage(("cuspatial",), ("cuspatial", "cuspatial-cu11", "cuspatial-cu12"), "geopandas / shapely"),
    CudaPackage(("rmm",), ("rmm", "rmm-cu11", "rmm-cu12"), "nothing: plain host memory off CUDA"),
    CudaPackage(("cupy", "cupyx"), ("cupy",), "numpy / scipy (cupy mirrors their API), or torch tensors"),
    CudaPackage(("pycuda",), ("pycuda",), "torch tensors and ops instead of hand-written kernels"),
    CudaPackage(("cuda",), ("cuda-python",), "torch.cuda's own API behind torch.cuda.is_available()"),
    CudaPackage(("tensorrt",), ("tensorrt",), "run the PyTorch model (or ONNX Runtime / Core ML)"),
    CudaPackage(("tensorrt_llm",), ("tensorrt-llm",), "run the Hugging Face / PyTorch model itself off CUDA"),
    CudaPackage(("torch_tensorrt",), ("torch-tensorrt",), "torch.compile (or the eager model) off CUDA"),
    CudaPackage(("numba.cuda",), ("numba-cuda",), "numba.njit (CPU) or torch ops instead of @cuda.jit kernels"),
    CudaPackage(("nvidia",), (),  # the distributions: DISTRIBUTION_PREFIXES
                "nvidia-* packages (DALI, cuDNN, NCCL wheels) exist only for CUDA; use torch's own "
                "data loading / ops off CUDA"),
    CudaPackage(("isaacgym", "isaacgymenvs"), (),  # NVIDIA's download, not on PyPI
                "Isaac Gym simulates on an NVIDIA GPU under Linux only: gymnasium / MuJoCo environments "
                "(or Isaac Lab's CPU paths) off CUDA"),
    CudaPackage(("pynvml", "nvidia_smi"), (),
                "guard NVML calls with try/except pynvml.NVMLError (no NVIDIA driver on a Mac); "
                "torch.mps.current_allocated_memory() for memory"),
)

#: Distribution-name prefixes with no macOS build (CUDA wheels: nvidia-cublas-cu12, ...).
DISTRIBUTION_PREFIXES = ("nvidia-", "cupy-cuda", "cudf-cu", "cuml-cu", "cugraph-cu", "rmm-cu", "dask-cudf-cu",
                         "pylibraft-cu", "raft-dask-cu", "cucim-cu")
#: Distributions under those prefixes that are pure Python and install anywhere (NVML bindings).
PORTABLE_DISTRIBUTIONS = frozenset({"nvidia-ml-py", "nvidia-ml-py3"})

#: PEP 503 names of every CUDA-only distribution in the table.
DISTRIBUTIONS = frozenset(d for p in PACKAGES for d in p.distributions)
#: Top-level import names whose whole package is CUDA-only (not ``numba``: only ``numba.cuda``).
IMPORT_ROOTS = frozenset(name for p in PACKAGES for name in p.imports if "." not in name)
#: Compiled CUDA extension module names, by the package that builds them.
COMPILED = {name: p for p in PACKAGES for name in p.compiled}

#: How a compiled CUDA extension is usually named when the table doesn't know it. The forks of
#: diff_gaussian_rasterization keep its name's shape (2DGS's diff_surfel_rasterization,
#: diff_gaussian_rasterization_depth, PGSR's diff_plane_rasterization): each is a CUDA build.
_COMPILED_NAME = re.compile(r"^(?:\w+_cuda(?:_lib|_ext|_kernels?)?|cuda_\w+_ext|\w+_cuda\d*"
                            r"|diff_\w*rasteri[sz]ation\w*)$")
_RASTERISER_FORK = re.compile(r"^diff_\w*rasteri[sz]ation\w*$")

_BY_IMPORT = {name: p for p in PACKAGES for name in p.imports}

#: What replaces a compiled module's ops, where it differs from its package's advice.
COMPILED_ADVICE = {
    "flash_attn_2_cuda": "porter_runtime.attention (flash_attn's Python API) instead of the raw extension",
    "rotary_emb": "apply the rotary embedding in PyTorch (x * cos + rotate_half(x) * sin)",
    "dropout_layer_norm": "torch.nn.functional.dropout + residual add + torch.nn.functional.layer_norm",
    "fused_dense_lib": "torch.nn.Linear (+ activation)",
    "fused_softmax_lib": "torch.softmax(x * scale + mask, dim=-1)",
    "xentropy_cuda_lib": "torch.nn.functional.cross_entropy",
    "selective_scan_cuda": "mamba_ssm.ops.selective_scan_interface.selective_scan_ref (PyTorch)",
    "causal_conv1d_cuda": "causal_conv1d_ref / F.conv1d(..., groups=channels) trimmed to the input length",
    "amp_C": "torch._foreach_* ops or a plain loop over the tensors",
    "fused_layer_norm_cuda": "torch.nn.functional.layer_norm / rms_norm",
    "fused_adam_cuda": "torch.optim.Adam / AdamW",
    "syncbn": "torch.nn.SyncBatchNorm (BatchNorm2d in a single process)",
}


def verify_hidden() -> dict:
    """What ``porter verify``'s guard (a standard-library-only ``sitecustomize`` in the
    target's interpreter) hides as not installed: the table's top-level import names and
    compiled modules, and the pattern of compiled CUDA extension names."""
    names = IMPORT_ROOTS | {name.partition(".")[0] for name in COMPILED}
    return {"hidden": sorted(names), "hidden_pattern": _COMPILED_NAME.pattern}


def package_for(module: str) -> Optional[CudaPackage]:
    """The table's row for an absolute module name (``flash_attn.layers.rotary``,
    ``numba.cuda``, ``rotary_emb``), or None when the module runs without CUDA."""
    parts = module.split(".")
    for end in range(len(parts), 0, -1):
        found = _BY_IMPORT.get(".".join(parts[:end]))
        if found is not None:
            return found
    return COMPILED.get(parts[0])


def is_cuda_only_module(module: str) -> bool:
    return package_for(module) is not None


def looks_compiled(module: str) -> bool:
    """A name the way CUDA extensions are named (``selective_scan_cuda``, ``knn_cuda_ext``)."""
    return _COMPILED_NAME.match(module.split(".")[0]) is not None


def is_cuda_only_distribution(name: str) -> bool:
    """Whether a distribution (PEP 503 normalised) has no build without CUDA."""
    return name not in PORTABLE_DISTRIBUTIONS and (name in DISTRIBUTIONS or name.startswith(DISTRIBUTION_PREFIXES))


def advice_for(module: str) -> str:
    """What to use off CUDA instead of ``module``."""
    specific = COMPILED_ADVICE.get(module.split(".")[0])
    if specific is not None:
        return specific
    if _RASTERISER_FORK.match(module.split(".")[0]):
        return _SPLATTING
    found = package_for(module)
    if found is not None:
        return found.advice
    return ("a PyTorch implementation of the extension's ops, used when the import fails "
            "(try/except ImportError)")
