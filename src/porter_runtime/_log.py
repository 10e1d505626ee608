"""One-time messages: the info line on device resolution and one-time warnings.

The runtime speaks rarely and says exactly what it changed; every message is
emitted once per process (per key) so that a training loop never floods stderr.
"""
from __future__ import annotations

import os
import sys
import warnings

_seen: set[str] = set()


def quiet() -> bool:
    """True when PORTER_QUIET is set to a truthy value (silences the info line)."""
    return env_flag("PORTER_QUIET")


def env_flag(name: str) -> bool:
    """Read an environment flag: unset, '', '0', 'false', 'no', 'off' mean False."""
    value = os.environ.get(name, "").strip().lower()
    return value not in ("", "0", "false", "no", "off")


def info_once(key: str, message: str) -> None:
    """Write ``porter_runtime: <message>`` to stderr once, unless PORTER_QUIET=1.

    Written directly (not through logging) because a vendored library must not
    install logging handlers, yet the line has to be visible by default.
    """
    if key in _seen or quiet():
        return
    _seen.add(key)
    print(f"porter_runtime: {message}", file=sys.stderr)


def warn_once(key: str, message: str, category: type[Warning] = UserWarning) -> None:
    """Emit ``warnings.warn`` once per key; warnings stay filterable by the user."""
    if key in _seen:
        return
    _seen.add(key)
    warnings.warn(f"porter_runtime: {message}", category, stacklevel=_user_stacklevel())


def _user_stacklevel() -> int:
    """Stack level of the first frame outside porter_runtime, so that the warning
    points at the user's line rather than at the shim."""
    here = os.path.dirname(os.path.abspath(__file__))
    frame, level = sys._getframe(1), 1
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(here):
        frame, level = frame.f_back, level + 1
    return level


def reset() -> None:
    """Forget which messages were shown (tests)."""
    _seen.clear()
