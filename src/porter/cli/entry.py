"""The console script's first code: it runs before anything heavy is imported.

It installs porter's handling of SIGTERM and SIGHUP (porter.engine.stops), answers
``porter --version`` without importing the rest of porter, and turns a Ctrl-C while
porter is still importing (about a second) into exit 130 without a traceback.
"""

from __future__ import annotations

import sys
from typing import Optional

from porter.engine.stops import STOPS, exit_code, install


def main(argv: Optional[list[str]] = None) -> None:
    install()
    args = sys.argv[1:] if argv is None else argv
    try:
        if args == ["--version"]:
            from porter import __version__

            print(f"porter, version {__version__}")
            return
        from porter.cli.app import main as app

        app(argv)
    except STOPS as exc:  # while importing, before a command took it over, or after it
        print("porter: interrupted", file=sys.stderr)
        sys.exit(exit_code(exc))
