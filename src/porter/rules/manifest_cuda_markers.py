"""CUDA-only packages in requirements*.txt and pyproject.toml get a platform marker (DEP101, DEP102)."""

from __future__ import annotations

import re
from typing import Iterator, Optional


from porter.project.requirements import (
    PLATFORM_MARKER,
    Site,
    apply_edits,
    is_cuda_only,
    normalise,
    parse,
    pyproject_sites,
    requirement_part,
    requirements_sites,
    url_requirement,
    with_platform_marker,
)
from porter.rulebase.families.manifest_files import (
    CUDA_NAMED,
    PYPROJECT_PATTERNS,
    REQUIREMENTS_PATTERNS,
    basename,
    marker_message,
)
from porter.rulebase.rule import Example, Safety, TextRule


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
        if CUDA_NAMED.search(basename(self.path)):
            return text
        edits = []
        for site in self.sites(text):
            req = parse(text[site.start:site.end])
            if req is None or not is_cuda_only(req.name) or CUDA_NAMED.search(site.group) \
                    or self.skip(text, site):
                continue
            new = with_platform_marker(req, site.quote)
            if new is not None:
                edits.append((site.start, site.start + req.end, new))
                self.changed(site.line, req.text, new, marker_message(
                    req.name, PLATFORM_MARKER.format(q=site.quote), self.cpu_linux()))
        return apply_edits(text, edits)


class RequirementsCudaOnly(_CudaOnlyMarker):
    """CUDA-only packages in requirements files get `; sys_platform != "darwin"`.

    What:
    In `requirements*.txt` / `*requirements*.in`, a requirement on a CUDA-only package
    (flash-attn, xformers, apex, bitsandbytes, adam-atan2, triton, deepspeed,
    mamba-ssm, causal-conv1d, liger-kernel, transformer-engine, nvidia-*, cupy-cuda*,
    pycuda, tensorrt, torch-tensorrt, onnxruntime-gpu, tensorflow-gpu, vllm, ...; names compared after
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
        Example("torch>=2.1\nnumpy\ntensorflow-gpu==2.10.0  # the FID feature extractor\n",
                'torch>=2.1\nnumpy\ntensorflow-gpu==2.10.0; sys_platform != "darwin"  # the FID feature extractor\n',
                path="requirements.txt"),
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
        return text if CUDA_NAMED.search(basename(self.path)) else self._url_lines(text)

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
                self.changed(number, part, new, marker_message(name, PLATFORM_MARKER.format(q='"'), self.cpu_linux()))
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
    form `optional-dependencies = {...}` and dynamic dependencies are not changed. In
    Poetry tables (`[tool.poetry.dependencies]`, `[tool.poetry.group.<name>.dependencies]`)
    a one-line entry gets Poetry's `markers` key (`flash-attn = {version = "^2.5",
    markers = "sys_platform != 'darwin'"}`); an entry that already has `markers` or
    `platform`, a list of constraints and a group named cuda or gpu are left alone. The extra form moves only
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
        Example('[tool.poetry.group.cuda.dependencies]\nflash-attn = "^2.5"\n'
                '[tool.poetry.dependencies]\nxformers = {version = "*", markers = "sys_platform == \'linux\'"}\n',
                path="pyproject.toml"),
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
        Example(  # a Poetry project: the version string and the inline table both get a marker
            '[tool.poetry.dependencies]\npython = "^3.10"\nflash-attn = "^2.5"\n'
            'tensorflow-gpu = {version = "^2.12", optional = true}\nnumpy = "*"\n',
            '[tool.poetry.dependencies]\npython = "^3.10"\n'
            'flash-attn = {version = "^2.5", markers = "sys_platform != \'darwin\'"}\n'
            'tensorflow-gpu = {version = "^2.12", optional = true, markers = "sys_platform != \'darwin\'"}\n'
            'numpy = "*"\n', path="pyproject.toml"),
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
        if not CUDA_NAMED.search(basename(self.path)):
            text = self._poetry_markers(text)
        return self._move_to_extra(text) if self.dependencies == "extra" else text

    # -- Poetry tables ---------------------------------------------------------
    def _poetry_markers(self, text: str) -> str:
        """``flash-attn = "^2.5"`` in a Poetry dependency table becomes
        ``flash-attn = {version = "^2.5", markers = "sys_platform != 'darwin'"}``; an
        inline table gets the ``markers`` key (one with ``markers`` or ``platform`` is
        left as it is)."""
        edits = []
        for line_no, start, match in _poetry_entries(text):
            name, value = match.group("name"), match.group("value")
            if not is_cuda_only(name.strip("\"'")):
                continue
            marker = '"sys_platform != \'darwin\'"'
            if value.startswith(("\"", "'")):
                new_value = f"{{version = {value}, markers = {marker}}}"
            elif value.startswith("{") and value.endswith("}") and not re.search(r"[{,]\s*(markers|platform)\s*=", value):
                inner = value[1:-1].rstrip()
                new_value = f"{{{inner}, markers = {marker}}}" if inner.strip() else f"{{markers = {marker}}}"
            else:
                continue
            at = start + match.start("value")
            edits.append((at, at + len(value), new_value))
            self.changed(line_no, match.group(0), match.group(0).replace(value, new_value, 1), marker_message(
                name.strip("\"'"), "sys_platform != 'darwin'", _POETRY_CPU_LINUX))
        return apply_edits(text, edits)

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


_POETRY_CPU_LINUX = "CPU-only Linux still installs it: put it in a Poetry group named cuda for that"
_POETRY_TABLE = re.compile(r"^\[\s*tool\.poetry\.(?:(?:dev-)?dependencies|group\.(?P<group>[^.\]]+)\.dependencies)\s*\]")
_POETRY_ENTRY = re.compile(r"""^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*|"[^"\n]+"|'[^'\n]+')\s*=\s*"""
                           r"""(?P<value>"[^"\n]*"|'[^'\n]*'|\{[^{}\n]*\})""")


def _poetry_entries(text: str) -> Iterator[tuple[int, int, "re.Match[str]"]]:
    """(line number, line start, match) of each one-line entry of a Poetry dependency
    table (``[tool.poetry.dependencies]``, ``[tool.poetry.group.<name>.dependencies]``);
    groups named cuda, gpu or cuNNN are meant for CUDA and skipped."""
    inside = False
    start = 0
    for number, line in enumerate(text.splitlines(keepends=True), 1):
        stripped = line.strip()
        if stripped.startswith("["):
            table = _POETRY_TABLE.match(stripped)
            inside = table is not None and not (table.group("group") and CUDA_NAMED.search(table.group("group")))
        elif inside:
            match = _POETRY_ENTRY.match(line)
            if match is not None:
                yield number, start, match
        start += len(line)


# An array element alone on its line: the string, a comma, a comment.
_ALONE = re.compile(r"""\s*(?:'[^'\n]*'|"[^"\n]*")\s*(?P<comma>,)?\s*(#.*)?""")


def _with_comma(line: str) -> str:
    """An array element line ending in a comma (before its comment)."""
    match = re.match(r"""(?P<item>\s*(?:'[^'\n]*'|"[^"\n]*"))(?P<comma>\s*,)?(?P<rest>.*)""", line, re.S)
    if match is None or match.group("comma"):
        return line
    return match.group("item") + "," + match.group("rest")
