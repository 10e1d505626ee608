"""What goes to the terminal: names from the repository made safe to print, whether to
colour (ruff's rule), and the consoles that carry everything for people."""

from __future__ import annotations

import os
import sys


def shown(text: str) -> str:
    """A name from the repository as it is safe to print: control characters and bytes
    that are not UTF-8 escaped (``\\x1b``, ``\\xe9``), never sent to the terminal raw."""
    out = []
    for ch in text:
        code = ord(ch)
        if 0xDC80 <= code <= 0xDCFF:  # a byte os.fsdecode could not decode
            out.append(f"\\x{code - 0xDC00:02x}")
        elif code < 0x20 or code == 0x7F or 0x80 <= code < 0xA0 or 0xD800 <= code <= 0xDFFF:
            out.append(ch.encode("unicode_escape").decode("ascii") if code < 0xD800 else f"\\u{code:04x}")
        else:
            out.append(ch)
    return "".join(out)


def for_terminal(value):
    """The report with every string made safe to print (``shown``)."""
    if isinstance(value, str):
        return shown(value)
    if isinstance(value, dict):
        return {k: for_terminal(v) for k, v in value.items()}
    if isinstance(value, list):
        return [for_terminal(v) for v in value]
    return value


def is_terminal(stream) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False


def colour_wanted(stream) -> bool:
    """Whether to colour what goes to ``stream``, as ruff decides: ``NO_COLOR`` (any
    non-empty value) never, ``FORCE_COLOR`` (non-empty) always, even piped; otherwise
    only on a terminal."""
    if os.environ.get("NO_COLOR"):
        return False
    if os.environ.get("FORCE_COLOR"):
        return True
    return is_terminal(stream)


def console(stderr: bool = True, markup: bool = False):
    """A rich console on stderr (or stdout) that colours by ``colour_wanted`` and never
    reads file text as markup or emoji codes (``path:100:3`` stays as written).
    ``markup``: porter's own markup in the strings printed (each value from the
    repository escaped by the caller). rich loads only when a command prints."""
    from rich.console import Console

    stream = sys.stderr if stderr else sys.stdout
    colour = colour_wanted(stream)
    return Console(stderr=stderr, force_terminal=colour or is_terminal(stream), no_color=not colour,
                   color_system="auto" if colour else None, highlight=False, emoji=False, markup=markup)


def stderr_console():
    """The console on stderr that carries everything for people."""
    return console(stderr=True)


def paint(text: str, stream=None, **style) -> str:
    """``text`` styled (click.style) when ``stream`` (stdout by default) gets colour."""
    import click

    return click.style(text, **style) if colour_wanted(stream or sys.stdout) else text
