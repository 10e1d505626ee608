"""Markdown (``porter explain``) rendered for a terminal: headings, inline code and
code blocks drawn by rich, no raw ``##`` or backticks. Piped, the CLI prints the
Markdown as written instead (porter.report.explain writes it with fenced code blocks, so
it renders as it is, here and on the documentation site)."""

from __future__ import annotations


def show_markdown(text: str) -> None:
    from rich.console import Console
    from rich.markdown import Markdown

    Console(highlight=False).print(Markdown(text, code_theme="ansi_dark"))
