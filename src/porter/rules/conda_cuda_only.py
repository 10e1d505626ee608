"""CUDA-only packages in conda environment files (DEP104)."""

from __future__ import annotations

import re
from typing import Iterator, Optional


from porter.project.requirements import (
    is_cuda_only,
    parse,
    requirement_part,
    with_platform_marker,
)
from porter.rulebase.families.manifest_files import (
    CONDA_PATTERNS,
    CUDA_NAMED,
    basename,
)
from porter.rulebase.rule import Example, Safety, TextRule


#: The CUDA toolkit's libraries by name (``libcublas``, ``libnvjitlink-dev``): a bare ``libcu``
#: prefix would take ``libcurl`` (curl) and ``libcups`` (printing) for CUDA.
_CONDA_CUDA = re.compile(
    r"^(?:cudatoolkit|cuda-.*|pytorch-cuda|cudnn|nccl|cupy|magma-cuda.*"
    r"|libcu(?:blas|dart|dnn|fft|file|pti|rand|solver|sparse|tensor|dss|xxfilt)(?:-.*)?"
    r"|libnv(?:jpeg|jitlink|fatbin|vm|ptxcompiler|toolsext|infer|rtc|ml)(?:-.*)?|libnpp.*)$")
_CONDA_ITEM = re.compile(r"^(?P<indent>\s*)-\s+(?P<item>[^#\s][^#]*?)\s*(?:#.*)?$")
_CONDA_SPEC = re.compile(r"^(?:(?P<channel>[\w.-]+)::)?(?P<name>[A-Za-z0-9_.-]+)(?P<rest>.*)$")


class CondaCudaOnly(TextRule):
    """A conda environment file installs CUDA-only packages.

    What:
    In `environment*.yml` / `conda*.yml`, reports conda dependencies that exist only
    for CUDA (`pytorch-cuda`, `cudatoolkit`, `cuda-*`, `cudnn`, `nccl`, packages from
    the `nvidia::` channel, builds pinned to `*cuda*`) and entries of the `pip:`
    sub-list naming a CUDA-only package (the list of DEP101).

    Why:
    `conda env create` fails on a Mac when a package has no osx-arm64 build:
    `PackagesNotFoundError: pytorch-cuda=12.1`; pip entries fail as in DEP101.

    Fix safety:
    Not rewritten: environment.yml has no platform markers, and conda-lock style
    `# [linux]` selectors are not read by `conda env create`. Keep a separate
    environment file for the Mac without these lines (or a `environment-cuda.yml`
    for the cluster; files named with cuda, gpu or cuNNN are left alone), or move
    the pip entries to a requirements file, where DEP101 marks them.

    Known limits:
    Reads the list items under `dependencies:` line by line; flow-style lists
    (`dependencies: [a, b]`) are not read.
    """

    code = "DEP104"
    name = "conda-cuda-only"
    safety = Safety.REVIEW
    patterns = CONDA_PATTERNS

    valid = [
        Example("name: x\ndependencies:\n  - python=3.11\n  - pytorch>=2.5\n  - pip:\n    - numpy\n",
                path="environment.yml"),
        Example("dependencies:\n  - pytorch-cuda=12.1\n", path="environment-cuda.yml"),
        Example("dependencies:\n  # - cudatoolkit=11.8\n  - numpy\n", path="environment.yml"),
        # curl and CUPS are not CUDA libraries (GroundingDINO's environment.yaml pins libcurl)
        Example("dependencies:\n  - libcurl=8.1.2\n  - libcups=2.4.2\n  - libnghttp2=1.52.0\n",
                path="environment.yaml"),
    ]
    invalid = [
        Example("name: train\nchannels:\n  - pytorch\n  - nvidia\ndependencies:\n  - pytorch=2.5\n"
                "  - pytorch-cuda=12.1  # CUDA 12\n", path="environment.yml"),
        Example("dependencies:\n  - nvidia::cuda-nvcc\n  - pytorch=2.1.0=py3.10_cuda11.8_cudnn8.7.0_0\n",
                path="environment.yaml"),
        Example("dependencies:\n  - python=3.10\n  - pip\n  - pip:\n      - flash_attn==2.5.8\n      - numpy\n",
                path="environment.yml"),
        Example("dependencies:\n  - libcublas=11.11.3.6\n  - libnvjpeg-dev=11.9.0.86\n  - libcurand=10.3.0.86\n",
                path="environment.yaml"),
    ]

    def check(self, text: str) -> str:
        if CUDA_NAMED.search(basename(self.path)):
            return text
        for number, indent, item, pip in _conda_items(text):
            self._check_item(number, indent, item, pip)
        return text

    def _check_item(self, number: int, indent: int, item: str, pip: bool) -> None:
        if pip:
            req = parse(requirement_part(item))
            if req is not None and is_cuda_only(req.name) and \
                    with_platform_marker(req) is not None:
                self.flag(number, f"pip entry {req.name} is CUDA-only and does not install on a Mac",
                          column=indent + 1, before=item,
                          suggestion=f'{with_platform_marker(req)}  # or leave it out of the Mac environment')
            return
        spec = _CONDA_SPEC.match(item)
        if spec is None:
            return
        name = spec.group("name").lower()
        why = ("comes from the nvidia channel" if spec.group("channel") == "nvidia" else
               "exists only for CUDA" if _CONDA_CUDA.match(name) or is_cuda_only(name) else
               "is pinned to a CUDA build" if "cuda" in spec.group("rest").lower() else None)
        if why:
            self.flag(number, f"conda package {name} {why}: `conda env create` fails on a Mac",
                      column=indent + 1, before=item,
                      suggestion="leave it out of the Mac environment (a separate environment file), "
                                 "e.g. pytorch without a CUDA build string")


def _conda_items(text: str) -> Iterator[tuple[int, int, str, bool]]:
    """(line, indent, item, under pip:) for the list items under `dependencies:`."""
    inside = False
    pip_indent: Optional[int] = None
    for number, line in enumerate(text.splitlines(), 1):
        if re.match(r"^dependencies\s*:\s*(#.*)?$", line):
            inside = True
            continue
        if inside and re.match(r"^[^\s#-]", line):
            inside = False
        item = _CONDA_ITEM.match(line) if inside else None
        if item is None:
            continue
        indent = len(item.group("indent"))
        if pip_indent is not None and indent <= pip_indent:
            pip_indent = None
        if re.fullmatch(r"pip\s*:", item.group("item")):
            pip_indent = indent
            continue
        yield number, indent, item.group("item"), pip_indent is not None
