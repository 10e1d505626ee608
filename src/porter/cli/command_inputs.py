"""What the commands make of the settings files and their flags, a bad one reported as
porter's one-line error (exit 2) before anything runs."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import click

from porter.cli import migrate_inputs as inputs
from porter.cli.terminal_text import shown
from porter.engine.config import Config, ConfigError, load_config
from porter.engine.run import RunConfig, default_jobs


class InputError(click.ClickException):
    """An input porter can't use (flag, settings file, target folder): one line, exit 2
    (printed by porter.cli.app, as every error is)."""

    exit_code = 2

    def show(self, file=None) -> None:
        # values from a settings file or a flag, never sent to the terminal raw
        click.echo(f"porter: error: {shown(self.format_message())}", err=True)


def or_input_error(function, *args):
    """``function(*args)`` with an input problem as porter's one-line error (exit 2)."""
    try:
        return function(*args)
    except inputs.InputProblem as exc:
        raise InputError(str(exc)) from None


def load_settings(root: Path, config_file: Optional[Path], paths=()) -> Config:
    """The explicit file's settings, else the nearest settings file at or above the
    first path (or the root)."""
    from porter.cli.folder_settings import nearest_config

    try:
        return load_config(root, config_file or nearest_config(paths[0] if paths else root))
    except ConfigError as exc:
        raise InputError(str(exc)) from None


def make_run_config(paths, root, settings: Config, select=(), ignore=(), exclude=(), runtime_dir=None,
                    unsafe_fixes=None, jobs=None, extend_select=(), extend_exclude=()) -> RunConfig:
    """The run's settings: each flag given wins over the settings files' values."""
    return or_input_error(lambda: inputs.run_config(paths, root, settings, select, ignore, exclude, runtime_dir,
                                                    unsafe_fixes, jobs or default_jobs(), extend_select,
                                                    extend_exclude))


def check_layout(config: RunConfig) -> None:
    """Refuse a runtime folder the run could not vendor into (porter.project.vendoring.runtime_home)."""
    from porter.project.vendoring.runtime_home import LayoutError

    try:
        config.layout()
    except LayoutError as exc:
        raise InputError(f"runtime folder {exc}") from None
