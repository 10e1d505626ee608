"""The ``porter`` command line: the command group, and the entry point that keeps porter's
exit codes (2 for a failure, never the 1 that means "changes pending") and its one error
style: click's usage errors print as porter's own, ``porter: error: ...``.

Each command has its own module: ``migrate_command``, ``verify_command``, ``rule_docs``
(``rules``, ``explain``), ``doctor``; ``fit`` lives in porter.fit.command.
"""

from __future__ import annotations

import signal
import sys
import traceback
from typing import Optional

import click

import porter
from porter.cli.doctor import doctor
from porter.cli.migrate_command import migrate
from porter.cli.rule_docs import explain, list_rules
from porter.cli.verify_command import verify
from porter.fit.command import fit


class PorterGroup(click.Group):
    """The command group; every error, click's usage errors included, is one
    ``porter: error: ...`` line (and a hint) on stderr, exit 2, as ruff prints them."""

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        try:
            code = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except click.exceptions.NoArgsIsHelpError as exc:  # `porter` alone: the help, as before
            exc.show()
            sys.exit(2)
        except click.ClickException as exc:
            show_error(exc)
            sys.exit(2)  # never click's 1, which would read as "changes pending"
        except click.Abort:  # Ctrl-C or end of input at a prompt
            click.echo("porter: interrupted", err=True)
            sys.exit(130)
        sys.exit(code if isinstance(code, int) else 0)


def show_error(exc: click.ClickException) -> None:
    """``porter: error: MESSAGE``, then for a usage error the command's usage and where
    its help is."""
    from porter.cli.terminal_text import shown

    click.echo(f"porter: error: {shown(exc.format_message())}", err=True)
    ctx = getattr(exc, "ctx", None)
    if isinstance(exc, click.UsageError) and ctx is not None:
        click.echo(f"{ctx.get_usage()}\nTry '{ctx.command_path} --help' for help.", err=True)


@click.group(cls=PorterGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(porter.__version__, prog_name="porter")
def cli() -> None:
    """Port CUDA-only PyTorch code to Apple Silicon (MPS) and CPU, unchanged on CUDA."""


cli.add_command(migrate)
cli.add_command(list_rules)
cli.add_command(explain)
cli.add_command(verify)  # verify and fit run the target's code; migrate never does
cli.add_command(fit)
cli.add_command(doctor)  # its probing imports torch only when the command runs


@cli.command()
@click.argument("shell", type=click.Choice(["bash", "zsh", "fish"]))
def completion(shell: str) -> None:
    """Print the shell completion script for SHELL.

    \b
    bash:  eval "$(porter completion bash)"   (in ~/.bashrc)
    zsh:   eval "$(porter completion zsh)"    (in ~/.zshrc)
    fish:  porter completion fish > ~/.config/fish/completions/porter.fish
    """
    from click.shell_completion import get_completion_class

    cls = get_completion_class(shell)
    click.echo(cls(cli, {}, "porter", "_PORTER_COMPLETE").source())


def main(argv: Optional[list[str]] = None) -> None:
    if hasattr(signal, "SIGPIPE"):  # `porter migrate --diff | head`: stop quietly, as git does
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    try:
        cli.main(args=argv, prog_name="porter")
    except Exception:  # a bug in porter: exit 2, never the 1 that means "changes pending"
        traceback.print_exc()
        print("porter: internal error (the traceback above); files already written are whole",
              file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":  # pragma: no cover
    main()
