"""CUDA wheel indexes and ``+cuXXX`` pins in requirements and pyproject.toml (DEP105)."""

from __future__ import annotations

import re


from porter.rulebase.families.manifest_files import (
    CONDA_PATTERNS,
    CUDA_NAMED,
    PYPROJECT_PATTERNS,
    REQUIREMENTS_PATTERNS,
    basename,
)
from porter.rulebase.rule import Example, Safety, TextRule


_INDEX_OPTION = re.compile(r"(?P<option>--index-url|--extra-index-url|--find-links|-i|-f)(?:\s*=\s*|\s+)(?P<url>\S+)")
_CUDA_URL = re.compile(r"https?://[^\s\"']*?(?:/whl/(?:nightly/)?cu\d{2,3}\b|pypi\.(?:ngc\.)?nvidia\.com|[+%]cu\d{2,3}|cuda)[^\s\"']*",
                       re.I)
_LOCAL_CUDA = re.compile(r"(?P<pin>={2,3}\s*[\w.!]+)\+cu\d{2,3}\b")
_WHAT_OPTION = {
    "--index-url": "replaces PyPI with a CUDA wheel index, which has no macOS wheels: pip fails on a Mac",
    "-i": "replaces PyPI with a CUDA wheel index, which has no macOS wheels: pip fails on a Mac",
    "--extra-index-url": ("adds a CUDA wheel index: a Mac falls back to PyPI, but CPU-only Linux installs the "
                          "CUDA build of torch (gigabytes of CUDA libraries it can't use)"),
    "--find-links": "finds wheels built for CUDA: a Mac and CPU-only Linux need other wheels",
    "-f": "finds wheels built for CUDA: a Mac and CPU-only Linux need other wheels",
}


class CudaWheelSource(TextRule):
    """A manifest installs from a CUDA wheel index or pins a `+cuNNN` build.

    What:
    In requirements files, pyproject.toml and conda environment files, reports
    `--index-url` / `--extra-index-url` / `--find-links` lines that point at a CUDA
    wheel index (`https://download.pytorch.org/whl/cu121`, `pypi.nvidia.com`), other
    URLs of CUDA wheels or indexes (`[[tool.uv.index]]`, direct `...+cu122...whl`
    links) and versions pinned with a CUDA local version (`torch==2.1.0+cu121`).

    Why:
    The CUDA index has no macOS wheels and `+cu121` builds exist only there, so pip
    fails on a Mac (`No matching distribution found for torch==2.1.0+cu121`); on
    CPU-only Linux an extra CUDA index pulls the CUDA build.

    Fix safety:
    Not rewritten: the index is how the CUDA machines get the right build. Pin the
    plain version (`torch==2.1.0`) and choose the build with the index option, in a
    separate requirements-cuda.txt for CUDA machines (files named with cuda, gpu or
    cuNNN are left alone); CPU-only Linux can use
    `--extra-index-url https://download.pytorch.org/whl/cpu`.

    Known limits:
    Recognises CUDA indexes by their URL (`/whl/cuNNN`, `nvidia.com`, `+cuNNN`,
    `cuda`); a private mirror with another name is not recognised.
    """

    code = "DEP105"
    name = "cuda-wheel-source"
    safety = Safety.REVIEW
    patterns = REQUIREMENTS_PATTERNS + PYPROJECT_PATTERNS + CONDA_PATTERNS

    valid = [
        Example("--extra-index-url https://download.pytorch.org/whl/cpu\ntorch==2.5.1\n", path="requirements.txt"),
        Example("# --index-url https://download.pytorch.org/whl/cu121\n", path="requirements.txt"),
        Example("--index-url https://download.pytorch.org/whl/cu121\ntorch==2.5.1+cu121\n",
                path="requirements-cu121.txt"),
        Example('[project]\ndependencies = ["torch==2.5.1+cpu"]\n', path="pyproject.toml"),
    ]
    invalid = [
        Example("--extra-index-url https://download.pytorch.org/whl/cu121\ntorch==2.1.0+cu121\n",
                path="requirements.txt"),
        Example("-i https://download.pytorch.org/whl/cu118\n", path="requirements.txt"),
        Example("-f https://data.pyg.org/whl/torch-2.1.0+cu121.html\ntorch-scatter\n", path="requirements.txt"),
        Example('[[tool.uv.index]]\nname = "pytorch-cu124"\nurl = "https://download.pytorch.org/whl/cu124"\n',
                path="pyproject.toml"),
        Example("dependencies:\n  - pip:\n    - --extra-index-url https://pypi.nvidia.com\n", path="environment.yml"),
    ]

    def check(self, text: str) -> str:
        if CUDA_NAMED.search(basename(self.path)):
            return text
        for number, line in enumerate(text.splitlines(), 1):
            code = line.split("#", 1)[0] if line.lstrip().startswith("#") or " #" in line else line
            self._check_line(number, line, code)
        return text

    def _check_line(self, number: int, line: str, code: str) -> None:
        option = _INDEX_OPTION.search(code)
        if option and _CUDA_URL.match(option.group("url")):
            self.flag(number, f"{option.group('option')} {option.group('url')} {_WHAT_OPTION[option.group('option')]}",
                      column=option.start() + 1, before=line,
                      suggestion="move it to a requirements-cuda.txt for CUDA machines; CPU-only Linux: "
                                 "--extra-index-url https://download.pytorch.org/whl/cpu")
            return
        pin = _LOCAL_CUDA.search(code)
        if pin and "://" not in code:
            self.flag(number, f"pins a CUDA build ({pin.group()}), which exists only on the CUDA wheel index "
                      "for Linux and Windows: pip fails on a Mac", column=pin.start() + 1, before=line,
                      suggestion=code[:pin.start()].strip() + pin.group("pin").replace(" ", ""))
            return
        url = _CUDA_URL.search(code)
        if url:
            self.flag(number, f"{url.group()} is a CUDA wheel or index: it has nothing for a Mac or CPU-only Linux",
                      column=url.start() + 1, before=line,
                      suggestion="use it on CUDA machines only (a separate requirements-cuda.txt or a CUDA-only "
                                 "index for the cuda extra)")
