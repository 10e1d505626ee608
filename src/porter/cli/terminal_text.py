"""What goes to the terminal: names from the repository made safe to print, and the
console on stderr that carries everything for people."""

from __future__ import annotations


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


def stderr_console():
    """A rich console on stderr (rich loads only when a command prints)."""
    from rich.console import Console

    return Console(stderr=True, no_color=False, highlight=False)
