"""Markdown (``porter explain``) rendered for a terminal: headings, inline code and
code blocks drawn by rich, no raw ``##`` or backticks. Piped, the CLI prints the
Markdown as written instead (porter.report.explain writes it with fenced code blocks, so
it renders as it is, here and on the documentation site)."""

from __future__ import annotations


def show_markdown(text: str) -> None:
    from rich.markdown import Markdown

    from porter.cli.terminal_text import console

    console(stderr=False).print(Markdown(text, code_theme="ansi_dark"))
