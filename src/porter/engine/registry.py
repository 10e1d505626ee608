"""Every rule porter has, found in the ``porter.rules`` package."""

from __future__ import annotations

import importlib
import pkgutil
from functools import lru_cache
from typing import Iterable, Optional, Sequence

from porter.rulebase.rule import BaseRule


@lru_cache(maxsize=1)
def all_rules() -> tuple[type[BaseRule], ...]:
    """All rule classes, ordered by code. Codes are unique (checked by a test)."""
    import porter.rules as package

    found: dict[str, type[BaseRule]] = {}
    for info in pkgutil.iter_modules(package.__path__):
        module = importlib.import_module(f"{package.__name__}.{info.name}")
        for value in vars(module).values():
            # Abstract helpers (no ``code`` of their own) are not rules.
            if (isinstance(value, type) and issubclass(value, BaseRule) and "code" in vars(value)
                    and value.__module__ == module.__name__):
                found[f"{value.code}:{value.__name__}"] = value
    return tuple(sorted(found.values(), key=lambda rule: rule.code))


def by_code(code: str) -> Optional[type[BaseRule]]:
    wanted = code.strip().upper()
    for rule in all_rules():
        if rule.code == wanted or rule.name == code.strip().lower():
            return rule
    return None


def select_rules(
    select: Iterable[str] = (), ignore: Iterable[str] = (), rules: Optional[Sequence[type[BaseRule]]] = None
) -> list[type[BaseRule]]:
    """Rules whose code starts with a ``select`` prefix and with no ``ignore`` prefix."""
    select = [s.strip().upper() for s in select if s.strip()]
    ignore = [s.strip().upper() for s in ignore if s.strip()]
    chosen = []
    for rule in rules if rules is not None else all_rules():
        if select and not any(rule.code.startswith(p) for p in select):
            continue
        if any(rule.code.startswith(p) for p in ignore):
            continue
        chosen.append(rule)
    return chosen
