"""Reading source files honestly: encodings, binary files, readable syntax errors."""

from __future__ import annotations

import ast
import io
import re
import sys
import tokenize
import warnings
from typing import Optional

import libcst as cst

_PY2_HINTS = (
    (re.compile(rb"^\s*print\s+[^\s(=.,)]", re.M), "a print statement"),
    (re.compile(rb"^\s*except\s+[\w.]+\s*,\s*\w+\s*:", re.M), "'except X, e:'"),
    (re.compile(rb"^\s*exec\s+[\"'\w]", re.M), "an exec statement"),
    (re.compile(rb"^\s*raise\s+\w+\s*,", re.M), "'raise E, msg'"),
    (re.compile(rb"`[^`\n]+`"), "backquote repr"),
    (re.compile(rb"\b0[0-7]+\b(?![.eEjJ])"), "an old-style octal literal"),
    (re.compile(rb"\bur[\"']"), "a ur'' string"),
)


def source_encoding(data: bytes) -> str:
    """The encoding Python itself would use for these bytes (BOM, then PEP 263)."""
    encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    return encoding


_COOKIE = re.compile(rb"^[ \t\f]*#.*?coding[:=]", re.M)


def has_coding_cookie(data: bytes) -> bool:
    """Whether line 1 or 2 declares an encoding (PEP 263)."""
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    return any(_COOKIE.match(line) for line in data.split(b"\n", 2)[:2])


def decode_error(data: bytes) -> Optional[str]:
    """Why these bytes are not Python source text, or None if they are."""
    if b"\x00" in data:
        return "binary file (contains NUL bytes); not Python source, left untouched"
    try:
        encoding = source_encoding(data)
    except SyntaxError as exc:
        if has_coding_cookie(data):
            return f"bad encoding declaration: {exc.msg if hasattr(exc, 'msg') else exc}"
        encoding = "utf-8"  # a bad byte on line 1 or 2, no declaration: say which byte
    try:
        data.decode(encoding)
    except (UnicodeDecodeError, LookupError) as exc:
        if isinstance(exc, LookupError):
            return f"unknown encoding {encoding!r}"
        line = data.count(b"\n", 0, exc.start) + 1
        return (
            f"cannot decode as {encoding}: byte 0x{data[exc.start]:02x} at line {line}; "
            "add a '# -*- coding: ... -*-' declaration or fix the file"
        )
    return None


def codec_error(data: bytes) -> Optional[str]:
    """Why porter can't write this file back in its own encoding without changing lines
    no rule touched (``unicode_escape`` escapes every newline; UTF-7 has more than one
    spelling of a character), or None."""
    try:
        encoding = source_encoding(data)
        same = data.decode(encoding).encode(encoding) == data
    except (SyntaxError, UnicodeError, LookupError):
        return None  # decode_error has said why
    if same:
        return None
    return (f"encoded as {encoding}, which does not give back the file's own bytes: porter would change "
            "lines no rule touched; convert it to UTF-8 to port it")


def describe_syntax_error(exc: cst.ParserSyntaxError, data: bytes) -> str:
    """A one-line reason for a file LibCST could not parse."""
    return python_syntax_error(data) or f"LibCST cannot parse this file (line {exc.raw_line}): {exc.message}"


def python_syntax_error(data: bytes) -> Optional[str]:
    """Why this Python rejects the file, or None. LibCST accepts some code CPython does
    not (``except A, e:`` parses as PEP 758's tuple; 200 nested brackets), and a file
    the interpreter rejects must be reported, never rewritten."""
    message, line = _python_syntax_error(data)
    if message is None:
        return None
    if not line:  # no position: the parser gave up (recursion, memory, NUL bytes)
        return f"{message}; left untouched"
    hint = python2_hint(data)
    text = f"syntax error at line {line}: {message}"
    if hint:
        text += f"; this looks like Python 2 code ({hint}): porter ports Python 3 code only"
    else:
        newer = newer_python(data)
        if newer:
            version, feature = newer
            text = (f"Python {sys.version_info.major}.{sys.version_info.minor} can't read line {line} ({message}): "
                    f"this file needs Python {version} or newer ({feature}); run porter with that Python to port it")
    return text


def newer_python(data: bytes) -> Optional[tuple[str, str]]:
    """(the Python version, the feature) where the file uses syntax newer than this
    Python reads and LibCST parses it: type parameters and ``type`` statements (PEP 695),
    or an f-string that reuses its own quote inside a replacement field (PEP 701)."""
    if sys.version_info >= (3, 12):
        return None
    try:
        module = cst.parse_module(data)
        finder = _NewerSyntax()
        module.visit(finder)
    except Exception:  # LibCST can't read it either (or nests past the recursion limit): the error is the file's
        return None
    return finder.found


class _NewerSyntax(cst.CSTVisitor):
    def __init__(self) -> None:
        super().__init__()
        self.found: Optional[tuple[str, str]] = None

    def visit_TypeAlias(self, node: cst.TypeAlias) -> bool:
        self.found = self.found or ("3.12", "a `type` statement, PEP 695")
        return False

    def visit_TypeParameters(self, node: cst.TypeParameters) -> bool:
        self.found = self.found or ("3.12", "type parameters, PEP 695")
        return False

    def visit_FormattedString(self, node: cst.FormattedString) -> bool:
        for part in node.parts:
            if isinstance(part, cst.FormattedStringExpression):
                inner = cst.Module([]).code_for_node(part.expression)
                if node.end in inner or "\\" in inner:
                    self.found = self.found or ("3.12", "an f-string that reuses its quotes or a backslash "
                                                        "inside `{}`, PEP 701")
        return True


def _python_syntax_error(data: bytes) -> tuple[Optional[str], int]:
    """Python's own message for a syntax error (compiled to an AST only: nothing runs)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ast.parse(data)
    except SyntaxError as exc:
        return exc.msg, exc.lineno or 0
    except RecursionError:
        return "too deeply nested for the parser", 0
    except (ValueError, MemoryError) as exc:
        return str(exc) or type(exc).__name__, 0
    return None, 0


def python2_hint(data: bytes) -> Optional[str]:
    for pattern, description in _PY2_HINTS:
        if pattern.search(data):
            return description
    return None
