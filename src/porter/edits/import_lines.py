"""What the import edits ask of a top-level line: whether it holds only imports, and the
name an alias binds with ``as``."""

from __future__ import annotations

from typing import Optional

import libcst as cst


def is_import_line(stmt: cst.BaseStatement) -> bool:
    return isinstance(stmt, cst.SimpleStatementLine) and all(
        isinstance(s, (cst.Import, cst.ImportFrom)) for s in stmt.body)


def alias_asname(alias: cst.ImportAlias) -> Optional[str]:
    """The ``c`` of ``import a.b as c`` / ``from a import b as c``; None without ``as``."""
    return alias.asname.name.value if alias.asname and isinstance(alias.asname.name, cst.Name) else None
