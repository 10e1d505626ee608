"""The layout LibCST's ``RemoveImportsVisitor`` loses, put back: no blank line left at
the top of the file, the blank line that separated a removed import's group kept for
the next import, an edited import list's trailing comma kept, and no comment lost."""

from __future__ import annotations

from collections import Counter

import libcst as cst

from porter.edits.import_lines import alias_asname, is_import_line
from porter.rulebase.matching import dotted_name


def keep_layout(before: cst.Module, after: cst.Module) -> cst.Module:
    """``after`` (``before`` less some imports) with the layout LibCST's removal loses:
    no blank line left at the top of the file, the blank line that separated a removed
    import's group kept for the next import, and an edited list's trailing comma kept.

    No comment is lost: the lines of a removed import (``import torch  # the
    framework``, with the comment lines above it) leave their comments where the import
    was, each on a line of its own; a comment on a name removed from an import list
    (``flash_attn_func,  # fast``) goes on a line above the import."""
    old, new = list(before.body), list(after.body)
    out: list = []
    i = 0
    for stmt in new:
        removed = []
        while i < len(old) and not _same_statement(old[i], stmt):
            removed.append(old[i])
            i += 1
        if i < len(old):
            stmt = _keep_comments(old[i], _keep_trailing_comma(old[i], stmt))
            i += 1
        if removed or not out:
            stmt = _after_removal(stmt, removed[0] if removed else None, at_start=not out)
        out.append(_before_comments_of(removed, stmt))
    if i < len(old):  # imports removed at the end of the file: their comments stay there
        return after.with_changes(body=out, footer=[*_comment_lines(old[i:]), *after.footer])
    return after.with_changes(body=out)


def _comments(node: cst.CSTNode) -> list[str]:
    """The text of every comment in ``node``, in source order."""
    found: list[str] = []

    class Collect(cst.CSTVisitor):
        def visit_Comment(self, comment: cst.Comment) -> None:
            found.append(comment.value)

    node.visit(Collect())
    return found


def _comment_lines(removed: list) -> list[cst.EmptyLine]:
    """The comments of removed statements, as lines: the lines above each statement as
    they were (blank ones too, when it had a comment), then its other comments."""
    lines: list[cst.EmptyLine] = []
    for stmt in removed:
        own = [line.comment.value for line in stmt.leading_lines if line.comment is not None]
        rest = _comments(stmt)[len(own):]
        if own or rest:
            lines += [*stmt.leading_lines, *(_line(text) for text in rest)]
    return lines


def _line(text: str) -> cst.EmptyLine:
    return cst.EmptyLine(comment=cst.Comment(text))


def _before_comments_of(removed: list, stmt: cst.BaseStatement) -> cst.BaseStatement:
    """``stmt`` with the comment lines of the statements removed just before it above
    its own leading lines."""
    lines = _comment_lines(removed)
    if not lines:
        return stmt
    return stmt.with_changes(leading_lines=[*lines, *stmt.leading_lines])


def _keep_comments(old: cst.BaseStatement, new: cst.BaseStatement) -> cst.BaseStatement:
    """``new`` (``old`` with some imported names removed) with the comments those names
    carried on lines above it."""
    if old.deep_equals(new):
        return new
    left = Counter(_comments(new))
    lost = []
    for text in _comments(old):
        if left[text]:
            left[text] -= 1
        else:
            lost.append(text)
    if not lost:
        return new
    return new.with_changes(leading_lines=[*new.leading_lines, *(_line(text) for text in lost)])


def _same_statement(old: cst.BaseStatement, new: cst.BaseStatement) -> bool:
    """``new`` is ``old`` itself, or ``old`` with some imported names removed."""
    if old.deep_equals(new):
        return True
    if not (is_import_line(old) and is_import_line(new)) or len(old.body) != len(new.body):  # type: ignore[attr-defined]
        return False
    for a, b in zip(old.body, new.body):  # type: ignore[attr-defined]
        if type(a) is not type(b):
            return False
        if isinstance(a, cst.ImportFrom) and not (
                a.module is not None and b.module is not None and a.module.deep_equals(b.module)
                and a.relative == b.relative):
            return False
        if isinstance(b.names, cst.ImportStar) or isinstance(a.names, cst.ImportStar):
            return False
        if not {_alias_key(n) for n in b.names} <= {_alias_key(n) for n in a.names}:
            return False
    return True


def _alias_key(alias: cst.ImportAlias) -> tuple:
    return (dotted_name(alias.name), alias_asname(alias))


def _blank_prefix(stmt: cst.BaseStatement) -> int:
    count = 0
    for line in stmt.leading_lines:
        if line.comment is not None:
            break
        count += 1
    return count


def _after_removal(stmt, removed, at_start: bool):
    own = _blank_prefix(stmt)
    if at_start:
        want = 0 if removed is not None else own
    elif removed is not None and is_import_line(stmt):
        want = max(own, _blank_prefix(removed))
    else:
        want = own
    if want == own:
        return stmt
    return stmt.with_changes(leading_lines=[cst.EmptyLine()] * want + list(stmt.leading_lines[own:]))


def _keep_trailing_comma(old: cst.BaseStatement, new: cst.BaseStatement) -> cst.BaseStatement:
    if not (is_import_line(old) and is_import_line(new)) or old.deep_equals(new):
        return new
    body = []
    for a, b in zip(old.body, new.body):  # type: ignore[attr-defined]
        if (isinstance(a, cst.ImportFrom) and isinstance(b, cst.ImportFrom) and isinstance(a.names, (list, tuple))
                and isinstance(b.names, (list, tuple)) and b.names and isinstance(a.names[-1].comma, cst.Comma)
                and not isinstance(b.names[-1].comma, cst.Comma)):
            names = list(b.names)
            names[-1] = names[-1].with_changes(comma=a.names[-1].comma)
            b = b.with_changes(names=names)
        body.append(b)
    return new.with_changes(body=body)  # type: ignore[attr-defined]

