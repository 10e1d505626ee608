"""Comments a rewrite would drop, carried into its replacement.

A rule that builds a new call from the values of the old one's arguments drops what lay
between them: the whitespace after a comma, before the closing parenthesis, and the
comments there (``x.cuda(0,  # first gpu`` then ``)``). Porter never loses a byte of the
user's code, so :meth:`porter.rulebase.rule.Rule.rewrite` hands every replacement
through :func:`keep_comments`: each comment of the original that the replacement lacks
goes back in, on the lines it had, just before the replacement's closing parenthesis
(or above the replacement statement). The rules need not each remember it.

Inside an expression a comment can only sit in parenthesized whitespace (LibCST's
``ParenthesizedWhitespace``: a first line's trailing comment, then own-line comments),
so that is what this module collects and rebuilds.
"""

from __future__ import annotations

from collections import Counter
from typing import Iterator, Union

import libcst as cst

_Line = Union[cst.TrailingWhitespace, cst.EmptyLine]


def comments_in(node: cst.CSTNode) -> Counter:
    """The text of every comment in ``node``, with its count."""
    return Counter(line.comment.value for line in _comment_lines(node))


def keep_comments(original: cst.CSTNode, replacement: object) -> object:
    """``replacement`` with the comments of ``original`` it lacks put back in.

    The replacement is returned as is when it lacks none, or when it is not a node
    that can hold them (a removal).
    """
    if not isinstance(replacement, cst.CSTNode) or replacement is original:
        return replacement
    lost = comments_in(original) - comments_in(replacement)
    if not lost:
        return replacement
    lines, closing = _lost_lines(original, lost)
    return _attach(replacement, lines, closing)


def _comment_lines(node: cst.CSTNode) -> Iterator[_Line]:
    """Every line of ``node`` that holds a comment, in source order."""
    stack = [node]
    while stack:
        current = stack.pop()
        if isinstance(current, (cst.TrailingWhitespace, cst.EmptyLine)) and current.comment is not None:
            yield current
        stack.extend(reversed(current.children))


def _lost_lines(original: cst.CSTNode, lost: Counter) -> tuple[list[_Line], cst.ParenthesizedWhitespace]:
    """The lines of ``original`` whose comments are lost, in order, and the whitespace
    that closed the last of them (the indentation of what came next)."""
    wanted = Counter(lost)
    lines: list[_Line] = []
    closing = cst.ParenthesizedWhitespace()
    for holder in _whitespace_with_comments(original):
        for line in [holder.first_line, *holder.empty_lines]:
            if line.comment is not None and wanted[line.comment.value] > 0:
                wanted[line.comment.value] -= 1
                lines.append(line)
                closing = holder
    for line in _comment_lines(original):  # comments outside parentheses: a statement's
        if wanted[line.comment.value] > 0:
            wanted[line.comment.value] -= 1
            lines.append(line)
    return lines, closing


def _whitespace_with_comments(node: cst.CSTNode) -> Iterator[cst.ParenthesizedWhitespace]:
    stack = [node]
    while stack:
        current = stack.pop()
        if isinstance(current, cst.ParenthesizedWhitespace):
            if any(line.comment is not None for line in [current.first_line, *current.empty_lines]):
                yield current
            continue
        stack.extend(reversed(current.children))


def _attach(node: cst.CSTNode, lines: list[_Line], closing: cst.ParenthesizedWhitespace) -> cst.CSTNode:
    if isinstance(node, (cst.SimpleStatementLine, cst.BaseCompoundStatement, cst.Else)):
        if isinstance(node, cst.SimpleStatementLine) and isinstance(lines[-1], cst.TrailingWhitespace) \
                and node.trailing_whitespace.comment is None:  # the line's own comment, back at its end
            node, lines = node.with_changes(trailing_whitespace=lines[-1]), lines[:-1]
        own = [_own_line(line, indent=True, whitespace="") for line in lines]
        return node.with_changes(leading_lines=[*node.leading_lines, *own])
    if isinstance(node, cst.Arg):
        return node.with_changes(whitespace_after_arg=_merged(node.whitespace_after_arg, lines, closing))
    if isinstance(node, cst.BaseExpression):
        return _attach_to_expression(node, lines, closing)
    if isinstance(node, (cst.Expr, cst.Assign, cst.AnnAssign, cst.AugAssign, cst.Return)) and node.value is not None:
        return node.with_changes(value=_attach_to_expression(node.value, lines, closing))
    return node


def _attach_to_expression(node: cst.BaseExpression, lines: list[_Line],
                          closing: cst.ParenthesizedWhitespace) -> cst.BaseExpression:
    """Before the expression's last closing parenthesis: its own, a call's, or a new pair."""
    if node.rpar:
        last = node.rpar[-1]
        rpar = [*node.rpar[:-1], last.with_changes(whitespace_before=_merged(last.whitespace_before, lines, closing))]
        return node.with_changes(rpar=rpar)
    if isinstance(node, cst.Call):
        if node.args:
            *rest, last = node.args
            merged = _merged(last.whitespace_after_arg, lines, closing)
            return node.with_changes(args=[*rest, last.with_changes(whitespace_after_arg=merged)])
        return node.with_changes(whitespace_before_args=_merged(node.whitespace_before_args, lines, closing))
    closing_paren = cst.RightParen(whitespace_before=_merged(cst.SimpleWhitespace(""), lines, closing))
    return node.with_changes(lpar=[cst.LeftParen()], rpar=[closing_paren])


def _merged(existing: cst.BaseParenthesizableWhitespace, lines: list[_Line],
            closing: cst.ParenthesizedWhitespace) -> cst.ParenthesizedWhitespace:
    """``existing`` whitespace followed by the comment ``lines``, ending where
    ``closing`` ended (the original's indentation of the next line)."""
    pad = closing.last_line.value
    own = [_own_line(line, indent=closing.indent, whitespace=pad) for line in lines]
    if isinstance(existing, cst.ParenthesizedWhitespace):
        return existing.with_changes(empty_lines=[*existing.empty_lines, *own])
    first, *rest = lines
    if isinstance(first, cst.TrailingWhitespace):
        head, own = first, own[1:]
    else:
        head = cst.TrailingWhitespace()
    return cst.ParenthesizedWhitespace(first_line=head, empty_lines=own, indent=closing.indent,
                                       last_line=closing.last_line)


def _own_line(line: _Line, *, indent: bool, whitespace: str) -> cst.EmptyLine:
    """A comment line as its own line (a trailing comment moved to a line of its own)."""
    if isinstance(line, cst.EmptyLine):
        return line
    return cst.EmptyLine(indent=indent, whitespace=cst.SimpleWhitespace(whitespace), comment=line.comment)
