"""Which top-level imports the ledger takes as resolving (porter.project.touchpoints.ledger).

An import resolves when its top-level name is in the standard library, in the scanned
tree, among the repository's declared dependencies, or one of the well-known
third-party modules below (all of which install on macOS and CPU-only Linux). Porter
never asks the Python it runs in: what happens to be installed beside porter says
nothing about the repository, and the answer must be the same on every machine.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Iterable, Iterator, Mapping

from porter.files.safe_io import text_bounded

#: Import names of popular packages that install without CUDA.
KNOWN = frozenset("""
    torch torchvision torchaudio torchtext torchdata torchmetrics torchelastic functorch
    numpy scipy pandas matplotlib seaborn plotly sklearn skimage PIL cv2 imageio tifffile
    yaml ruamel toml tomli tomllib tqdm requests urllib3 packaging einops einx jaxtyping beartype
    typing_extensions mypy_extensions setuptools pkg_resources wheel pip Cython distutils
    timm transformers datasets evaluate accelerate huggingface_hub safetensors tokenizers
    sentencepiece diffusers peft trl optimum tiktoken regex ftfy nltk spacy sacremoses jieba
    wandb tensorboard tensorboardX mlflow comet_ml neptune aim clearml
    lightning pytorch_lightning lightning_fabric lightning_utilities omegaconf hydra fire absl gin
    ml_collections jsonargparse tyro simple_parsing configargparse
    tensorflow tensorflow_datasets tensorflow_probability tensorflow_text keras tf_keras
    jax jaxlib flax optax orbax chex haiku
    h5py lmdb pyarrow msgpack msgpack_numpy zarr netCDF4 xarray webdataset
    click rich typer colorama termcolor tabulate prettytable loguru
    pydantic attr attrs cattrs dataclasses_json marshmallow jsonschema
    jsonlines ujson orjson simplejson dill cloudpickle joblib filelock psutil xxhash zstandard
    ray dask distributed zmq IPython ipywidgets ipykernel notebook nbformat
    kornia albumentations torchvision pycocotools lpips open_clip clip webcolors
    av decord librosa soundfile audioread resampy torchcrepe pyworld
    sympy networkx igraph numba llvmlite onnx onnxruntime onnxsim coremltools openvino
    gym gymnasium mujoco dm_control pybullet stable_baselines3
    pytest hypothesis mock nose faiss annoy hnswlib sentence_transformers
    bs4 lxml html5lib markdown jinja2 flask fastapi uvicorn starlette gradio streamlit
    openai anthropic httpx aiohttp websockets grpc google protobuf boto3 botocore s3fs fsspec gcsfs
    shapely pyproj rasterio geopandas trimesh open3d pytorch3d plyfile imgaug
    deepdiff pyparsing six future certifi charset_normalizer idna _pytest
""".split()) | frozenset("""
    torch_xla torch_npu torch_mlu torch_musa torch_neuronx neuronx_distributed habana_frameworks
    intel_extension_for_pytorch oneccl_bindings_for_pytorch mlx
""".split())  # other accelerators' backends: code that imports them never runs on CUDA either

#: Distribution names (PEP 503) whose import name is not the name with "-" as "_".
DIST_IMPORTS = {
    "pillow": "PIL", "scikit-learn": "sklearn", "scikit-image": "skimage", "opencv-python": "cv2",
    "opencv-python-headless": "cv2", "opencv-contrib-python": "cv2", "pyyaml": "yaml",
    "beautifulsoup4": "bs4", "protobuf": "google", "hydra-core": "hydra", "pytorch-lightning": "pytorch_lightning",
    "tensorboardx": "tensorboardX", "faiss-cpu": "faiss", "faiss-gpu": "faiss", "msgpack-python": "msgpack",
    "python-dateutil": "dateutil", "attrs": "attr", "pyzmq": "zmq", "ipython": "IPython",
    "open-clip-torch": "open_clip", "absl-py": "absl", "gin-config": "gin", "ruamel-yaml": "ruamel",
    "sentence-transformers": "sentence_transformers", "grpcio": "grpc", "nvidia-ml-py": "pynvml",
    "nvidia-ml-py3": "pynvml", "flash-attn": "flash_attn", "tf-keras": "tf_keras", "typing-extensions": "typing_extensions",
}

_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")
_QUOTED = re.compile(r"""["']([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[[^\]]*\])?\s*(?:[<>=!~;@(]|["'])""")
_REQUIRES_DIST = re.compile(r"^Requires-Dist:\s*([A-Za-z0-9][A-Za-z0-9._-]*)", re.M)
_CONDA = re.compile(r"^\s*-\s*([A-Za-z0-9][A-Za-z0-9._-]*)", re.M)


def import_names(distribution: str) -> set[str]:
    """The import names a distribution probably provides."""
    name = re.sub(r"[-_.]+", "-", distribution).lower()
    return {DIST_IMPORTS.get(name, name.replace("-", "_")), distribution.replace("-", "_").replace(".", "_")}


def _manifest_names(path: Path, text: str) -> Iterator[str]:
    name = path.name
    if name == "METADATA":
        yield from _REQUIRES_DIST.findall(text)
    elif name.endswith(".txt"):
        for line in text.splitlines():
            match = _NAME.match(line)
            if match and not line.lstrip().startswith(("-", "#")):
                yield match.group(1)
    elif name.endswith((".yml", ".yaml")):
        yield from _CONDA.findall(text)
    else:  # pyproject.toml, setup.py, setup.cfg: quoted requirement strings
        yield from _QUOTED.findall(text)
        if name == "setup.cfg":
            for line in text.splitlines():
                match = _NAME.match(line)
                if match and line[:1].isspace():
                    yield match.group(1)


_MANIFESTS = ("requirements*.txt", "requirements/*.txt", "pyproject.toml", "setup.py", "setup.cfg",
              "environment*.yml", "environment*.yaml", "*.dist-info/METADATA")


def declared(root: Path) -> frozenset[str]:
    """Import names of the dependencies the repository's manifests declare."""
    found: set[str] = set()
    for pattern in _MANIFESTS:
        for path in root.glob(pattern):
            try:
                text = text_bounded(path)
            except OSError:
                continue
            for dist in _manifest_names(path, text):
                found |= import_names(dist)
    return frozenset(found)


#: The name of a CUDA extension a build script compiles: ``CUDAExtension("pkg.fused_cuda", ...)``.
_CUDA_EXTENSION = re.compile(r"""\bCUDAExtension\(\s*(?:name\s*=\s*)?["']([\w.]+)["']""")
#: A name a build script binds to ``CUDAExtension`` and calls instead (Deformable-DETR's and
#: GroundingDINO's ``extension = CUDAExtension`` when CUDA is there, ``CppExtension`` else).
_EXTENSION_ALIAS = re.compile(r"^[ \t]*(\w+)[ \t]*=[ \t]*CUDAExtension[ \t]*(?:#.*)?$", re.M)


def extensions(root: Path, rel_paths: Iterable[str]) -> frozenset[str]:
    """Module names of the CUDA extensions the tree's ``setup.py`` files compile (the last
    part of each dotted name, and the whole name's first part): what an ``import`` of a
    built extension names. Only build scripts are read, so a large tree costs nothing."""
    found: set[str] = set()
    for rel in rel_paths:
        if rel.rsplit("/", 1)[-1] != "setup.py":
            continue
        try:
            found |= extension_names(text_bounded(root / rel))
        except OSError:
            continue
    return frozenset(found)


def extension_names(text: str) -> set[str]:
    """The import names of the CUDA extensions one build script (``setup.py``) compiles."""
    names = _CUDA_EXTENSION.findall(text)
    for alias in _EXTENSION_ALIAS.findall(text):  # `extension = CUDAExtension`, then `extension("name", ...)`
        names += re.findall(r"\b" + alias + r"""\(\s*(?:name\s*=\s*)?["']([\w.]+)["']""", text)
    return {part for name in names for part in (name.rsplit(".", 1)[-1], name.split(".")[0])}


def extension_importers(sources: Mapping[str, bytes], names: Iterable[str]) -> frozenset[str]:
    """The files of ``sources`` with a module-level ``import NAME`` (``as`` an alias) of one
    of ``names``, compiled extensions, alone or in a module-level ``try:`` (Mask2Former's):
    where TP608 may wire a reference path."""
    wanted = sorted(set(names))
    if not wanted:
        return frozenset()
    pattern = re.compile(rb"^(?:try:[ \t]*(?:#[^\n]*)?\n[ \t]+)?import[ \t]+(?:"
                         + b"|".join(re.escape(n.encode()) for n in wanted) + rb")\b", re.M)
    return frozenset(rel for rel, data in sources.items() if pattern.search(data))


def local(rel_paths: Iterable[str]) -> frozenset[str]:
    """Every module name the tree itself provides: each folder and each file's stem
    (scripts import their neighbours; ``sys.path`` tricks reach any folder)."""
    found: set[str] = set()
    for rel in rel_paths:
        parts = rel.split("/")
        found.update(parts[:-1])
        if parts[-1].endswith((".py", ".pyi")):
            found.add(parts[-1].rsplit(".", 1)[0])
    return frozenset(found)


def is_standard(name: str) -> bool:
    return name in sys.stdlib_module_names or name == "__future__"
