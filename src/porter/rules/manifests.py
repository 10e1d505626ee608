"""Dependency manifests: CUDA-only packages, CUDA wheel sources and the torch version.

requirements*.txt, pyproject.toml, setup.py (literal ``install_requires``) and conda
environment files. Rewrites touch only a requirement's own span: comments, order,
spacing and pip options stay as they were.
"""

from __future__ import annotations

import re
from typing import Iterator, Optional

import libcst as cst

from porter.project.requirements import (
    PLATFORM_MARKER,
    TORCH_MINIMUM_TEXT,
    Site,
    apply_edits,
    is_cuda_only,
    normalise,
    parse,
    pyproject_sites,
    requirement_part,
    requirements_sites,
    torch_bound,
    url_requirement,
    with_platform_marker,
)
from porter.rulebase.rule import Example, Needs, Rule, Safety, TextRule

REQUIREMENTS_PATTERNS = ("*requirements*.txt", "*requirements*.in")
PYPROJECT_PATTERNS = ("pyproject.toml",)
CONDA_PATTERNS = ("environment*.yml", "environment*.yaml", "conda*.yml", "conda*.yaml")

# A file, extra or group meant for CUDA machines only (requirements-cuda.txt, the
# `gpu` extra, `cu121`): CUDA-only packages belong there and are left alone.
_CUDA_NAMED = re.compile(r"(?:^|[-_.])(?:cuda|gpu|cu\d{2,3})(?:[-_.]|$)", re.I)


def _basename(path: str) -> str:
    return path.replace("\\", "/").rsplit("/", 1)[-1]


def _marker_message(name: str, marker: str, cpu_linux: str) -> str:
    return (f"{name} is CUDA-only and does not install on a Mac: now required only where "
            f"`{marker}`, so Linux and Windows are unchanged; {cpu_linux}")


class _CudaOnlyMarker(TextRule):
    """Shared by the manifest rules that mark CUDA-only requirements."""

    _CPU_LINUX = ""

    def sites(self, text: str) -> Iterator[Site]:
        raise NotImplementedError

    def skip(self, text: str, site: Site) -> bool:
        """Whether another form handles this requirement."""
        return False

    def cpu_linux(self) -> str:
        return self._CPU_LINUX

    def check(self, text: str) -> str:
        if _CUDA_NAMED.search(_basename(self.path)):
            return text
        edits = []
        for site in self.sites(text):
            req = parse(text[site.start:site.end])
            if req is None or not is_cuda_only(req.name) or _CUDA_NAMED.search(site.group) \
                    or self.skip(text, site):
                continue
            new = with_platform_marker(req, site.quote)
            if new is not None:
                edits.append((site.start, site.start + req.end, new))
                self.changed(site.line, req.text, new, _marker_message(
                    req.name, PLATFORM_MARKER.format(q=site.quote), self.cpu_linux()))
        return apply_edits(text, edits)


class RequirementsCudaOnly(_CudaOnlyMarker):
    """CUDA-only packages in requirements files get `; sys_platform != "darwin"`.

    What:
    In `requirements*.txt` / `*requirements*.in`, a requirement on a CUDA-only package
    (flash-attn, xformers, apex, bitsandbytes, adam-atan2, triton, deepspeed,
    mamba-ssm, causal-conv1d, liger-kernel, transformer-engine, nvidia-*, cupy-cuda*,
    pycuda, tensorrt, torch-tensorrt, onnxruntime-gpu, vllm, ...; names compared after
    PEP 503 normalisation) gets the environment marker `sys_platform != "darwin"`,
    joined to an existing marker with `and` (parenthesised when it has an `or`).

    Why:
    These packages publish no macOS wheels (or only a CUDA source build), so
    `pip install -r requirements.txt` fails on a Mac before anything runs. The port
    calls porter_runtime, which uses them on CUDA and the PyTorch path elsewhere.
    bitsandbytes is marked too: 0.43 to 0.45 ship Linux and Windows wheels only, and
    porter_runtime uses bitsandbytes only on CUDA, so a Mac loses nothing.

    Fix safety:
    Safe: the marker is true on Linux and Windows, the platforms where CUDA exists, so
    every CUDA machine installs exactly what it did. `sys_platform != "darwin"` rather
    than `== "linux"`, because xformers and bitsandbytes ship Windows CUDA wheels.
    A marker can't see whether a machine has CUDA: CPU-only Linux still installs
    these packages, and those with only a CUDA source build (flash-attn) fail to
    build there. For CPU-only Linux move them to a separate requirements-cuda.txt
    (a file named with cuda, gpu or cuNNN is left alone), or use the `cuda` extra of
    pyproject.toml (DEP102). The rewrite message says so.

    A requirement named only by its URL (a wheel file name, `#egg=flash-attn`) gets the
    marker too (`URL ; marker`, which pip reads); an editable install of one
    (`-e git+...#egg=flash-attn`) can't carry a marker and is reported.

    Known limits:
    A URL or path that does not name its package, and requirements split over
    continuation lines, are not changed.
    A marker that already names `sys_platform`, `platform_system` or `os_name` is kept
    as it is. Files in a `requirements/` folder match only if their name does.
    """

    code = "DEP101"
    name = "requirements-cuda-only"
    safety = Safety.SAFE
    patterns = REQUIREMENTS_PATTERNS
    _CPU_LINUX = "for CPU-only Linux, install it from a separate requirements-cuda.txt"

    valid = [
        Example("torch>=2.5\nnumpy\n", path="requirements.txt"),
        Example('flash-attn==2.5.8; sys_platform == "linux"\n', path="requirements.txt"),
        Example("# flash-attn==2.5.8\n", path="requirements.txt"),
        Example("flash-attn==2.5.8\nxformers\n", path="requirements-cuda.txt"),
        Example("flash-attention-jax==0.3\nmy-triton-utils\n", path="requirements.txt"),
    ]
    invalid = [
        Example("torch>=2.5\nflash-attn==2.5.8  # fused attention\n",
                'torch>=2.5\nflash-attn==2.5.8; sys_platform != "darwin"  # fused attention\n',
                path="requirements.txt"),
        Example('Flash_Attn>=2.3; python_version >= "3.9"\n',
                'Flash_Attn>=2.3; python_version >= "3.9" and sys_platform != "darwin"\n',
                path="requirements.txt"),
        Example("xformers==0.0.28 ; python_version < '3.12' or python_version > '3.13'\n",
                "xformers==0.0.28 ; (python_version < '3.12' or python_version > '3.13') "
                'and sys_platform != "darwin"\n', path="requirements-dev.txt"),
        Example("-r base.txt\nnvidia-apex @ https://example.com/apex-0.1-py3-none-any.whl\n",
                '-r base.txt\nnvidia-apex @ https://example.com/apex-0.1-py3-none-any.whl ; '
                'sys_platform != "darwin"\n', path="requirements.txt"),
        Example("deepspeed==0.14.0 \\\n    --hash=sha256:0123\n",
                'deepspeed==0.14.0; sys_platform != "darwin" \\\n    --hash=sha256:0123\n',
                path="requirements.txt"),
        Example("torch\nhttps://example.com/flash_attn-2.5.8-cp311-cp311-linux_x86_64.whl\n",
                'torch\nhttps://example.com/flash_attn-2.5.8-cp311-cp311-linux_x86_64.whl ; sys_platform != "darwin"\n',
                path="requirements.txt"),
        Example("triton\r\nbitsandbytes[cuda]\r\n",
                'triton; sys_platform != "darwin"\r\nbitsandbytes[cuda]; sys_platform != "darwin"\r\n',
                path="requirements.txt"),
    ]

    def sites(self, text: str) -> Iterator[Site]:
        return requirements_sites(text)

    def check(self, text: str) -> str:
        text = super().check(text)
        return text if _CUDA_NAMED.search(_basename(self.path)) else self._url_lines(text)

    def _url_lines(self, text: str) -> str:
        """Lines that name a CUDA-only package only through a URL: a direct URL gets the
        marker (pip reads ``URL ; marker``); an editable install can't carry one: reported."""
        out = []
        for number, line in enumerate(text.splitlines(keepends=True), 1):
            body = line.rstrip("\r\n")
            found = url_requirement(requirement_part(body)) if body.strip() and not body.lstrip().startswith("#") \
                else None
            if found is None or not is_cuda_only(found[0]):
                out.append(line)
                continue
            name, editable, rest = found
            if editable:
                self.flag(number, f"editable install of {name}, a CUDA-only package: pip cannot build it on a Mac, "
                          "and an editable line takes no environment marker", before=body,
                          suggestion="move this line to a requirements-cuda.txt, or name the package with a marker: "
                                     f'{normalise(name)} @ git+... ; sys_platform != "darwin"')
            elif re.search(r"\b(?:sys_platform|platform_system|os_name)\b", rest):
                pass  # someone decided already
            elif ";" in rest:
                self.flag(number, f"{name} (CUDA-only) is installed from a URL with its own marker; check that it "
                          "excludes macOS", before=body)
            else:
                part = requirement_part(body).rstrip()
                new = part + " ; " + PLATFORM_MARKER.format(q='"')
                self.changed(number, part, new, _marker_message(name, PLATFORM_MARKER.format(q='"'), self.cpu_linux()))
                line = new + body[len(part):] + line[len(body):]
            out.append(line)
        return "".join(out)


class PyprojectCudaOnly(_CudaOnlyMarker):
    """CUDA-only packages in pyproject.toml dependencies get `; sys_platform != 'darwin'`.

    What:
    In `[project] dependencies`, `[project.optional-dependencies]` and
    `[dependency-groups]`, a requirement string naming a CUDA-only package (the list of
    DEP101) gets the marker `sys_platform != 'darwin'` inside the string (quoted with
    the other kind of quote). With `dependencies = "extra"` the requirements of
    `[project] dependencies` move instead, line and comment included, to an extra
    named `cuda` (created after the `[project]` table when missing).

    Why:
    `pip install .` (or `pip install .[train]`) fails on a Mac when one of these has
    no macOS build. The extra form also makes `pip install .` succeed on CPU-only
    Linux: CUDA machines install `.[cuda]`.

    Fix safety:
    The marker form (the default) is safe: Linux and Windows, where CUDA exists,
    install exactly what they did. The extra form changes what `pip install .`
    installs on a CUDA machine (it now needs `.[cuda]`), so it is applied only when
    the project chooses it (`dependencies = "extra"` in [tool.porter]). Extras and
    groups named cuda, gpu or cuNNN are meant for CUDA and are left alone.

    Known limits:
    Only one-line strings without escapes inside the arrays are read; the inline
    form `optional-dependencies = {...}`, dynamic dependencies and Poetry tables
    (`[tool.poetry.dependencies]`) are not changed. The extra form moves only
    requirements that sit alone on their line; others get the marker.
    """

    code = "DEP102"
    name = "pyproject-cuda-only"
    safety = Safety.SAFE
    patterns = PYPROJECT_PATTERNS
    #: "marker" or "extra": where CUDA-only requirements of [project] dependencies go.
    dependencies = "marker"
    #: The extra the "extra" form moves them to.
    extra_name = "cuda"
    _CPU_LINUX = ("CPU-only Linux still installs it: choose `dependencies = \"extra\"` to move it "
                  "to a `cuda` extra")

    valid = [
        Example('[project]\nname = "x"\ndependencies = ["torch>=2.5", "numpy"]\n', path="pyproject.toml"),
        Example('[project.optional-dependencies]\ncuda = ["flash-attn>=2.5", "triton"]\n',
                path="pyproject.toml"),
        Example('[tool.black]\nextend-exclude = ["flash-attn"]\n', path="pyproject.toml"),
        Example("[project]\ndependencies = [\n    \"xformers; platform_system == 'Linux'\",\n]\n",
                path="pyproject.toml"),
    ]
    invalid = [
        Example('[project]\nname = "x"\ndependencies = [\n    "torch>=2.5",\n    "flash-attn>=2.5.8",  # fast\n]\n',
                '[project]\nname = "x"\ndependencies = [\n    "torch>=2.5",\n'
                "    \"flash-attn>=2.5.8; sys_platform != 'darwin'\",  # fast\n]\n", path="pyproject.toml"),
        Example("[project.optional-dependencies]\ntrain = ['deepspeed==0.14', 'wandb']\n",
                "[project.optional-dependencies]\ntrain = ['deepspeed==0.14; sys_platform != \"darwin\"', "
                "'wandb']\n", path="pyproject.toml"),
        Example('[dependency-groups]\ndev = ["pytest", "Liger_Kernel; python_version >= \'3.10\'"]\n',
                '[dependency-groups]\ndev = ["pytest", "Liger_Kernel; python_version >= \'3.10\' and '
                'sys_platform != \'darwin\'"]\n', path="pyproject.toml"),
    ]

    def sites(self, text: str) -> Iterator[Site]:
        return pyproject_sites(text)

    def check(self, text: str) -> str:
        # Markers first: they change no line count, so the lines the move reports
        # are still the file's own.
        text = super().check(text)
        return self._move_to_extra(text) if self.dependencies == "extra" else text

    def cpu_linux(self) -> str:
        if self.dependencies == "extra":
            return (f"it can't move to the `{self.extra_name}` extra (not alone on its line, or that "
                    "extra is a one-line array), so CPU-only Linux still installs it")
        return self._CPU_LINUX

    def skip(self, text: str, site: Site) -> bool:
        return self.dependencies == "extra" and self._movable(text, site) is not None

    # -- the extra form ------------------------------------------------------
    def _movable(self, text: str, site: Site) -> Optional[tuple[int, int]]:
        """The span of the line of a CUDA-only requirement of [project] dependencies
        that sits alone on its line and can move, else None."""
        req = parse(text[site.start:site.end])
        if site.group != "dependencies" or req is None or not is_cuda_only(req.name):
            return None
        start = text.rfind("\n", 0, site.start) + 1
        end = text.find("\n", site.end) + 1 or len(text)
        match = _ALONE.fullmatch(text[start:end].rstrip("\r\n"))
        last = re.match(r"(\s|#[^\n]*)*\]", text[end:]) is not None
        return (start, end) if match and (match.group("comma") or last) else None

    def _move_to_extra(self, text: str) -> str:
        moved = [(span, site) for site in pyproject_sites(text) if (span := self._movable(text, site))]
        if not moved:
            return text
        lines = [_with_comma(text[start:end]) for (start, end), _ in moved]
        new = self._add_to_extra(apply_edits(text, [(s, e, "") for (s, e), _ in moved]), lines)
        if new is None:  # the extra can't take them: mark them instead
            self.dependencies = "marker"
            return super().check(text)
        for _, site in moved:
            req = parse(text[site.start:site.end])
            self.changed(site.line, req.text, f"[project.optional-dependencies] {self.extra_name}: {req.text}",
                         f"{req.name} is CUDA-only: moved from the dependencies to the "
                         f"`{self.extra_name}` extra; CUDA machines install `.[{self.extra_name}]`")
        return new

    def _add_to_extra(self, text: str, lines: list[str]) -> Optional[str]:
        """``text`` with ``lines`` added to the extra (None: its array can't take them)."""
        nl = "\r\n" if "\r\n" in text else "\n"
        body = "".join(line if line.endswith("\n") else line + nl for line in lines)
        key = re.search(rf"^{re.escape(self.extra_name)}\s*=.*$", text, re.M)
        if key:  # an existing extra: only a multi-line array whose first line is `[`
            opened = re.match(r"[^=]*=\s*\[\s*(#.*)?$", key.group().rstrip("\r"))
            return text[:key.end() + 1] + body + text[key.end() + 1:] if opened else None
        array = f"{self.extra_name} = [{nl}{body}]{nl}"
        table = re.search(r"^\[\s*project\.optional-dependencies\s*\][^\n]*\n", text, re.M)
        if table:
            return text[:table.end()] + array + text[table.end():]
        block = f"[project.optional-dependencies]{nl}{array}"
        project = re.search(r"^\[\s*project\s*\][^\n]*\n", text, re.M)
        after = re.search(r"^\[", text[project.end():], re.M) if project else None
        if after is None:
            head = text if text.endswith("\n") or not text else text + nl
            return head + (nl if head else "") + block
        at = project.end() + after.start()
        gap = "" if text[:at].endswith(nl + nl) else nl
        return text[:at] + gap + block + nl + text[at:]


# An array element alone on its line: the string, a comma, a comment.
_ALONE = re.compile(r"""\s*(?:'[^'\n]*'|"[^"\n]*")\s*(?P<comma>,)?\s*(#.*)?""")


def _with_comma(line: str) -> str:
    """An array element line ending in a comma (before its comment)."""
    match = re.match(r"""(?P<item>\s*(?:'[^'\n]*'|"[^"\n]*"))(?P<comma>\s*,)?(?P<rest>.*)""", line, re.S)
    if match is None or match.group("comma"):
        return line
    return match.group("item") + "," + match.group("rest")


class SetupCudaOnly(Rule):
    """CUDA-only packages in a literal `install_requires` get `; sys_platform != "darwin"`.

    What:
    In `setuptools.setup(install_requires=[...])` (or `distutils.core.setup`), each
    plain string literal naming a CUDA-only package (the list of DEP101) gets the
    marker `sys_platform != "darwin"` inside the string, quoted with the other kind
    of quote.

    Why:
    `pip install .` fails on a Mac when a CUDA-only package has no macOS build.

    Fix safety:
    Safe: the marker is true on Linux and Windows, where CUDA exists, so CUDA
    machines install exactly what they did. CPU-only Linux still installs the package:
    move it to `extras_require={"cuda": [...]}` by hand if that matters.

    Known limits:
    Only a list or tuple literal passed as `install_requires=` is read; requirements
    built in code (read from requirements.txt, concatenated, in a variable) are not,
    and `extras_require` is left alone. Strings with prefixes, escapes or triple
    quotes are skipped.
    """

    code = "DEP103"
    name = "setup-cuda-only"
    safety = Safety.SAFE
    needs = Needs(targets=frozenset({"setuptools.setup", "distutils.core.setup"}))

    valid = [
        Example('from setuptools import setup\nsetup(name="x", install_requires=["torch>=2.5"])\n', path="setup.py"),
        Example('def f(setup):\n    setup(install_requires=["flash-attn"])\n', path="setup.py"),
        Example('import mylib as setuptools\nsetuptools.setup(install_requires=["flash-attn"])\n', path="setup.py"),
        Example('from setuptools import setup\nsetup(extras_require={"cuda": ["flash-attn"]})\n', path="setup.py"),
    ]
    invalid = [
        Example('from setuptools import setup\n\nsetup(\n    name="x",\n    install_requires=[\n'
                '        "torch>=2.5",\n        "flash-attn>=2.5",  # kernels\n    ],\n)\n',
                'from setuptools import setup\n\nsetup(\n    name="x",\n    install_requires=[\n'
                '        "torch>=2.5",\n        "flash-attn>=2.5; sys_platform != \'darwin\'",  # kernels\n'
                '    ],\n)\n', path="setup.py"),
        Example("import setuptools as st\nst.setup(install_requires=('xformers', 'numpy'))\n",
                "import setuptools as st\nst.setup(install_requires=('xformers; sys_platform != \"darwin\"', "
                "'numpy'))\n", path="setup.py"),
        Example("from distutils.core import setup\nsetup(install_requires=['triton; python_version >= \"3.9\"'])\n",
                "from distutils.core import setup\nsetup(install_requires=['triton; python_version >= \"3.9\" "
                "and sys_platform != \"darwin\"'])\n", path="setup.py"),
    ]

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self._marked: dict[cst.SimpleString, str] = {}

    def visit_Call(self, node: cst.Call) -> None:
        if not self.matches(node.func):
            return
        for arg in node.args:
            if arg.keyword is not None and arg.keyword.value == "install_requires" and \
                    isinstance(arg.value, (cst.List, cst.Tuple)):
                for element in arg.value.elements:
                    self._consider(element.value)

    def _consider(self, node: cst.BaseExpression) -> None:
        if not isinstance(node, cst.SimpleString) or node.prefix or len(node.quote) != 1 or "\\" in node.value:
            return
        req = parse(node.raw_value)
        if req is None or not is_cuda_only(req.name):
            return
        inner = "'" if node.quote == '"' else '"'
        new = with_platform_marker(req, inner)
        if new is not None:
            self._marked[node] = f"{node.quote}{new}{node.raw_value[req.end:]}{node.quote}"

    def leave_SimpleString(self, original: cst.SimpleString, updated: cst.SimpleString) -> cst.BaseExpression:
        new = self._marked.get(original)
        if new is None:
            return updated
        req = parse(original.raw_value)
        marker = PLATFORM_MARKER.format(q="'" if original.quote == '"' else '"')
        return self.rewrite(original, updated.with_changes(value=new),
                            _marker_message(req.name, marker, "CPU-only Linux still installs it: move it to "
                                            "extras_require={\"cuda\": [...]} if that matters"))


_CONDA_CUDA = re.compile(r"^(?:cudatoolkit|cuda-.*|pytorch-cuda|cudnn|nccl|libcu.*|libnv.*|cupy|magma-cuda.*)$")
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
    ]
    invalid = [
        Example("name: train\nchannels:\n  - pytorch\n  - nvidia\ndependencies:\n  - pytorch=2.5\n"
                "  - pytorch-cuda=12.1  # CUDA 12\n", path="environment.yml"),
        Example("dependencies:\n  - nvidia::cuda-nvcc\n  - pytorch=2.1.0=py3.10_cuda11.8_cudnn8.7.0_0\n",
                path="environment.yaml"),
        Example("dependencies:\n  - python=3.10\n  - pip\n  - pip:\n      - flash_attn==2.5.8\n      - numpy\n",
                path="environment.yml"),
    ]

    def check(self, text: str) -> str:
        if _CUDA_NAMED.search(_basename(self.path)):
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
        if _CUDA_NAMED.search(_basename(self.path)):
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


class TorchMinimum(TextRule):
    """A torch requirement that admits no torch porter_runtime runs on (2.5) is reported.

    What:
    In requirements files and pyproject.toml dependencies, reports a torch specifier
    that admits no torch 2.5 or newer (`torch==1.13.1`, `torch>=1.10,<2.0`,
    `torch~=2.1.0`). Nothing is rewritten: a lower bound below 2.5 (`torch>=2.0`)
    is left as written, with no finding.

    Why:
    Ported code calls porter_runtime, whose MPS paths use `torch.autocast("mps")`
    and `torch.mps.recommended_max_memory()` (torch 2.5) and whose precision twins
    use `torch.amp.custom_fwd(device_type=...)` (torch 2.4). A specifier that rules
    out every such torch can't give a Mac what the port needs.

    Fix safety:
    Review only. A pin or a cap is a decision about the whole project, and raising
    a lower bound would change what a CUDA machine may keep installed, so porter
    changes neither. A bare lower bound needs nothing: pip installs the newest torch
    it allows, and the runtime warns once when it runs on MPS with an older torch.

    Known limits:
    setup.py and environment.yml (`pytorch>=1.13`) are not read; pre-release and
    local parts of a bound are compared by their release numbers.
    """

    code = "DEP106"
    name = "torch-minimum"
    safety = Safety.REVIEW
    patterns = REQUIREMENTS_PATTERNS + PYPROJECT_PATTERNS  # no `words`: names ignore case (Torch)

    valid = [
        Example("torch>=2.5\ntorchvision>=0.10\n", path="requirements.txt"),
        Example("torch\ntorch-geometric>=1.0\n", path="requirements.txt"),
        Example('[project]\ndependencies = ["torch>=2.6,<3"]\n', path="pyproject.toml"),
        Example("# torch==1.13\n", path="requirements.txt"),
        # what a CUDA machine installs stays the project's choice
        Example("numpy\ntorch>=1.10  # any recent torch\n", path="requirements.txt"),
        Example('Torch >= 2.0, < 3 ; python_version >= "3.9"\n', path="requirements.txt"),
        Example('[project]\ndependencies = [\n    "torch~=2.1",\n]\n', path="pyproject.toml"),
    ]
    invalid = [
        Example("torch==1.13.1\n", path="requirements.txt", line=1, message="allows no torch 2.5 or newer"),
        Example('[project.optional-dependencies]\nold = ["torch>=1.10,<2.0"]\n', path="pyproject.toml",
                line=2, message="allows no torch 2.5 or newer"),
        Example("numpy\ntorch~=2.1.0\n", path="requirements.txt", line=2),
    ]

    def check(self, text: str) -> str:
        sites = pyproject_sites(text) if _basename(self.path) == "pyproject.toml" else requirements_sites(text)
        for site in sites:
            req = parse(text[site.start:site.end])
            if req is None or req.key != "torch" or req.spec is None:
                continue
            if torch_bound(req.specifier)[0] == "pinned":
                self.flag(site.line, f"torch{req.specifier.strip()} allows no torch {TORCH_MINIMUM_TEXT} or newer, "
                          "which porter_runtime needs on a Mac (MPS autocast and memory queries)",
                          column=site.column(text), before=req.text, suggestion=f"torch>={TORCH_MINIMUM_TEXT}")
        return text
