"""The commands that document the rules: ``porter rules`` (the table) and ``porter explain``
(one rule's documentation and examples)."""

from __future__ import annotations

import sys

import click

from porter.cli import migrate_inputs as inputs
from porter.cli.command_inputs import InputError
from porter.engine.registry import all_rules, by_code


@click.command("rules")
@click.argument("prefixes", nargs=-1)
@click.option("--json", "as_json", is_flag=True, help="Print the rules as JSON on stdout.")
def list_rules(prefixes: tuple[str, ...], as_json: bool) -> None:
    """List the rules (those whose code starts with one of PREFIXES): code, name, safety and summary."""
    wanted = tuple(p.strip().upper() for p in inputs.split(prefixes))
    rules = [r for r in all_rules() if not wanted or r.code.startswith(wanted)]
    if not rules:
        raise InputError(f"no rule code starts with {', '.join(wanted)}; `porter rules` lists them")
    if as_json:
        import json

        click.echo(json.dumps([{"code": r.code, "name": r.name, "safety": r.safety.value,
                                "summary": r.summary()} for r in rules], indent=2))
        return
    if not sys.stdout.isatty():  # piped: one line per rule, never wrapped (grep, cut, a pager)
        width = max(len(r.name) for r in rules)
        for rule in rules:
            click.echo(f"{rule.code:<6} {rule.name:<{width}} {rule.safety.value:<6} {' '.join(rule.summary().split())}")
        return
    from rich.table import Table

    from porter.cli.terminal_text import console

    table = Table(show_header=True, header_style="bold")
    for column in ("code", "name", "safety", "summary"):
        table.add_column(column)
    for rule in rules:
        table.add_row(rule.code, rule.name, rule.safety.value, rule.summary())
    console(stderr=False).print(table)


@click.command()
@click.argument("code")
def explain(code: str) -> None:
    """Print a rule's documentation and its examples (Markdown; rendered on a terminal)."""
    from porter.report.explain import render

    rule = by_code(code.strip().upper())
    if rule is None:
        raise InputError(f"no rule {code!r}; `porter rules` lists them")
    text = render(rule)
    if sys.stdout.isatty():  # rendered for a terminal; piped, the Markdown stays as written
        from porter.cli.terminal_markdown import show_markdown

        show_markdown(text)
    else:
        click.echo(text)
