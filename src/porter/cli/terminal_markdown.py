"""Markdown (``porter explain``) rendered for a terminal: headings, inline code and
code blocks drawn by rich, no raw ``##`` or backticks. Piped, the CLI prints the
Markdown as written instead."""

from __future__ import annotations

import re

_INDENTED = re.compile(r"^ {4}")


def fenced(text: str) -> str:
    """The text with its indented code blocks made fenced ``python`` blocks and its
    first line a heading: an indented block right under ``Before:`` would read, to a
    Markdown parser, as more of that paragraph."""
    lines = text.splitlines()
    out = [f"# {lines[0]}"] if lines else []
    in_code = False
    for line in lines[1:]:
        code = bool(_INDENTED.match(line)) or (in_code and not line.strip())
        if code and not in_code:
            out.append("```python")
        elif not code and in_code:
            _close(out)
        out.append(line[4:] if code else line)
        in_code = code
    if in_code:
        _close(out)
    return "\n".join(out) + "\n"


def _close(out: list[str]) -> None:
    trailing = 0
    while out and not out[-1].strip():  # blank lines after a block belong outside it
        out.pop()
        trailing += 1
    out.append("```")
    out.extend([""] * trailing)


def show_markdown(text: str) -> None:
    from rich.markdown import Markdown

    from porter.cli.terminal_text import console

    console(stderr=False).print(Markdown(fenced(text), code_theme="ansi_dark"))
