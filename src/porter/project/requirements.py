"""Requirement strings (PEP 508) in dependency manifests, read without `packaging`.

Porter's own dependencies are libcst, click and rich, so the manifest rules parse the
few parts they need by hand: the name, the version specifier, a URL and the marker,
with the offsets of each, so a rewrite edits only its span and keeps the rest of the
line (spacing, comments, options) byte for byte.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterator, Optional

from porter.rulebase.cuda_packages import DISTRIBUTIONS, is_cuda_only_distribution

#: The marker that keeps a requirement off macOS, the one platform with no CUDA.
#: Linux and Windows, where CUDA exists, are left exactly as before.
PLATFORM_MARKER = 'sys_platform != {q}darwin{q}'

#: porter_runtime calls torch.amp.custom_fwd(device_type=...) (torch 2.4) and
#: torch.mps.recommended_max_memory() (torch 2.5) without a version guard.
TORCH_MINIMUM = (2, 5)
TORCH_MINIMUM_TEXT = "2.5"

#: Packages with no macOS build, by PEP 503 normalised name (porter.rulebase.cuda_packages).
CUDA_ONLY = DISTRIBUTIONS

# name [extras] (specifier | @ url) [; marker]
_REQUIREMENT = re.compile(
    r"""(?P<name>[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?)\s*
        (?P<extras>\[[^\]]*\]\s*)?
        (?:(?P<url>@\s*\S+)|(?P<spec>\(?\s*(?:===|==|!=|~=|<=|>=|<|>)[^;]*?))?
        (?:\s*;(?P<marker>.*?))?\s*$""",
    re.X,
)
_CLAUSE = re.compile(r"(?P<op>===|==|!=|~=|<=|>=|<|>)\s*(?P<version>[^,\s)]+)")
_PLATFORM_WORDS = re.compile(r"\b(?:sys_platform|platform_system|os_name)\b")
_QUOTED = re.compile(r"\"[^\"]*\"|'[^']*'")


def normalise(name: str) -> str:
    """PEP 503: lower case, runs of -, _ and . become one -."""
    return re.sub(r"[-_.]+", "-", name).lower()


def is_cuda_only(name: str) -> bool:
    """Whether the distribution a requirement names has no build without CUDA."""
    return is_cuda_only_distribution(normalise(name))


@dataclass(frozen=True)
class Requirement:
    """A parsed requirement; offsets are relative to the string it was parsed from."""

    text: str
    name: str
    spec: Optional[tuple[int, int]]
    url: bool
    marker: Optional[tuple[int, int]]
    end: int  # end of the requirement without trailing spaces

    @property
    def key(self) -> str:
        return normalise(self.name)

    @property
    def specifier(self) -> str:
        return self.text[self.spec[0]:self.spec[1]] if self.spec else ""


def parse(text: str) -> Optional[Requirement]:
    """``text`` as one requirement (no comment, no pip options), or None."""
    stripped = text.rstrip()
    lead = len(text) - len(text.lstrip())
    match = _REQUIREMENT.fullmatch(stripped, lead)
    if match is None:
        return None
    marker = match.span("marker") if match.group("marker") is not None else None
    if marker is not None and not match.group("marker").strip():
        return None
    return Requirement(stripped, match.group("name"), match.span("spec") if match.group("spec") else None,
                       match.group("url") is not None, marker, len(stripped))


def with_platform_marker(req: Requirement, quote: str = '"') -> Optional[str]:
    """The requirement with ``sys_platform != "darwin"`` added to its marker, or None
    when its marker already speaks of the platform (someone decided already)."""
    ours = PLATFORM_MARKER.format(q=quote)
    if req.marker is None:
        glue = " ; " if req.url else "; "
        return req.text + glue + ours
    start, end = req.marker
    existing = req.text[start:end].strip()
    if _PLATFORM_WORDS.search(existing):
        return None
    lead = start + len(req.text[start:end]) - len(req.text[start:end].lstrip())
    if re.search(r"\bor\b", _QUOTED.sub("", existing)):
        return f"{req.text[:lead]}({existing}) and {ours}{req.text[end:]}"
    return f"{req.text[:lead]}{existing} and {ours}{req.text[end:]}"


# -- the torch lower bound ---------------------------------------------------

def release(version: str) -> Optional[tuple[int, ...]]:
    match = re.match(r"v?(\d+(?:\.\d+)*)", version)
    return tuple(int(p) for p in match.group(1).split(".")) if match else None


def _padded(version: tuple[int, ...], size: int = 3) -> tuple[int, ...]:
    return version + (0,) * (size - len(version))


def _caps_below_minimum(op: str, version: str) -> bool:
    """Whether one clause rules out every torch from TORCH_MINIMUM on."""
    wildcard = version.endswith(".*")
    rel = release(version)
    if rel is None:
        return False
    low = _padded(TORCH_MINIMUM)
    if op in ("==", "===") and wildcard:
        return rel < TORCH_MINIMUM[:len(rel)]
    if op in ("==", "==="):
        return _padded(rel) < low
    if op == "<":
        return _padded(rel) <= low
    if op == "<=":
        return _padded(rel) < low
    if op == "~=" and len(rel) > 1:
        return rel[:-1] < TORCH_MINIMUM[:len(rel) - 1]
    return False


def torch_bound(spec: str) -> tuple[str, Optional[str]]:
    """For a torch specifier: ("ok", None), ("raise", new_spec) when only its lower
    bound is below TORCH_MINIMUM, or ("pinned", None) when it admits no torch that new."""
    clauses = list(_CLAUSE.finditer(spec))
    if any(_caps_below_minimum(c.group("op"), c.group("version")) for c in clauses):
        return "pinned", None
    new = spec
    for clause in reversed(clauses):
        op, rel = clause.group("op"), release(clause.group("version"))
        if op not in (">=", ">", "~=") or rel is None or _padded(rel) >= _padded(TORCH_MINIMUM):
            continue
        replacement = f"~={TORCH_MINIMUM_TEXT}" if op == "~=" else f">={TORCH_MINIMUM_TEXT}"
        spacing = spec[clause.end("op"):clause.start("version")]
        new = new[:clause.start()] + replacement[:2] + spacing + replacement[2:] + new[clause.end():]
    return ("raise", new) if new != spec else ("ok", None)


# -- where requirements sit in a requirements file ---------------------------

@dataclass(frozen=True)
class Site:
    """One requirement in a manifest: its 1-based line, the offsets of its text in the
    file, the quote a marker inside it must use, and the group it belongs to."""

    line: int
    start: int
    end: int
    quote: str = '"'
    group: str = ""

    def column(self, text: str) -> int:
        return self.start - (text.rfind("\n", 0, self.start) + 1) + 1


_OPTION_OR_CONTINUATION = re.compile(r"\s+(?:-|\\$)")
_COMMENT = re.compile(r"(?:^|\s)#")


def requirement_part(line: str) -> str:
    """The requirement of a requirements.txt line: before a comment, before pip
    options such as --hash, and before a line continuation."""
    comment = _COMMENT.search(line)
    part = line[:comment.start()] if comment else line
    option = _OPTION_OR_CONTINUATION.search(part)
    return part[:option.start()] if option else part


_EDITABLE = re.compile(r"^\s*(?:-e|--editable)(?:\s+|=)(?P<url>\S+)")
_URL_LINE = re.compile(r"^\s*(?P<url>(?:[\w+.-]+://|\.{0,2}/)\S+|\S+\.whl)(?P<rest>.*)$")
_EGG = re.compile(r"[#&]egg=(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)")


def url_requirement(part: str) -> Optional[tuple[str, bool, str]]:
    """(package name, editable, text after the URL) of a requirements line that names its
    package only through a URL: ``-e git+...#egg=flash-attn``, ``git+...#egg=NAME``, or a
    direct wheel URL or path (``.../flash_attn-2.5.8+cu122-cp311-linux_x86_64.whl``)."""
    editable = _EDITABLE.match(part)
    match = editable or _URL_LINE.match(part)
    if match is None:
        return None
    url = match.group("url")
    egg = _EGG.search(url)
    if egg:
        name = egg.group("name")
    elif url.split("#")[0].split("?")[0].endswith(".whl"):
        name = url.split("#")[0].split("?")[0].rsplit("/", 1)[-1].split("-")[0]
    else:
        return None
    return name, editable is not None, "" if editable else match.group("rest")


def requirements_sites(text: str) -> Iterator[Site]:
    """Requirement lines of a pip requirements file (options, includes, URLs, paths
    and editable installs are not requirements by name and are skipped)."""
    offset = 0
    continued = False  # a line after a trailing backslash belongs to the line before
    for number, line in enumerate(text.splitlines(keepends=True), 1):
        body = line.rstrip("\r\n")
        if not continued and body.strip() and not body.lstrip().startswith(("-", "#")):
            part = requirement_part(body)
            if parse(part) is not None:
                lead = len(part) - len(part.lstrip())
                yield Site(number, offset + lead, offset + len(part.rstrip()))
        continued = body.endswith("\\") and _COMMENT.search(body) is None
        offset += len(line)


# -- where requirements sit in a pyproject.toml --------------------------------

_TABLE = re.compile(r"^\s*\[\s*(?P<name>[^\[\]#]+?)\s*\]\s*(?:#.*)?$")
_ARRAY_KEY = re.compile(r"""^\s*(?P<key>[A-Za-z0-9_-]+|"[^"\n]*"|'[^'\n]*')\s*=\s*\[""")


def requirement_group(table: Optional[str], key: str) -> Optional[str]:
    """The group of a requirement array: "dependencies", an extra's or a dependency
    group's name, or None for arrays that hold no requirements."""
    key = key.strip("\"'")
    if table == "project":
        return "dependencies" if key == "dependencies" else None
    if table in ("project.optional-dependencies", "dependency-groups"):
        return key
    return None


def pyproject_sites(text: str) -> Iterator[Site]:
    """Requirement strings of [project] dependencies, [project.optional-dependencies]
    and [dependency-groups] (PEP 621 / PEP 735)."""
    table: Optional[str] = None
    pos = 0
    while pos < len(text):
        eol = text.find("\n", pos)
        eol = len(text) if eol < 0 else eol
        line = text[pos:eol]
        header = _TABLE.match(line)
        key = _ARRAY_KEY.match(line)
        if line.lstrip().startswith("[["):
            table = None
        elif header:
            table = re.sub(r"\s+", "", header.group("name")).replace('"', "")
        elif key and requirement_group(table, key.group("key")) is not None:
            end = yield from array_strings(text, pos + key.end() - 1, requirement_group(table, key.group("key")))
            eol = text.find("\n", end)
            eol = len(text) if eol < 0 else eol
        pos = eol + 1


def array_strings(text: str, i: int, group: str) -> Iterator[Site]:
    """The one-line strings directly inside the TOML array opening at ``text[i]``;
    returns the offset after its closing bracket."""
    depth = braces = 0
    while i < len(text):
        char = text[i]
        if char == "#":
            i = _line_end(text, i)
            continue
        if char in "\"'":
            end = _string_end(text, i)
            content = text[i + 1:end - 1]
            simple = not text.startswith(char * 3, i) and "\n" not in content and \
                (char == "'" or "\\" not in content)
            if simple and depth == 1 and braces == 0:
                yield Site(text.count("\n", 0, i) + 1, i + 1, end - 1, "'" if char == '"' else '"', group)
            i = end
            continue
        depth += (char == "[") - (char == "]")
        braces += (char == "{") - (char == "}")
        i += 1
        if depth == 0:
            return i
    return i


def _line_end(text: str, i: int) -> int:
    end = text.find("\n", i)
    return len(text) if end < 0 else end


def _string_end(text: str, i: int) -> int:
    """Offset after the TOML string starting at ``text[i]``."""
    quote = text[i]
    if text.startswith(quote * 3, i):
        end = text.find(quote * 3, i + 3)
        return len(text) if end < 0 else end + 3
    j = i + 1
    while j < len(text) and text[j] not in (quote, "\n"):
        j += 2 if quote == '"' and text[j] == "\\" else 1
    return j + 1


def apply_edits(text: str, edits: list[tuple[int, int, str]]) -> str:
    """Replace each (start, end) span by its new text; spans don't overlap."""
    for start, end, new in sorted(edits, reverse=True):
        text = text[:start] + new + text[end:]
    return text
