"""The ``porter`` command line: the command group, and the entry point that keeps porter's
exit codes (2 for a failure, never the 1 that means "changes pending").

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


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
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
