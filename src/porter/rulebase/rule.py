"""The rule framework: the Rule base class, findings, and examples.

A rule is one class in one file under ``porter/rules/``. It carries a stable ``code``, a
``name``, a ``safety``, a docstring with the sections What / Why / Fix safety / Known
limits, and its own ``valid`` and ``invalid`` examples, which are both its tests
(``tests/test_rule_examples.py``) and its documentation (``porter explain CODE``).

Rules implement LibCST ``visit_<Node>`` / ``leave_<Node>`` methods. The engine runs all
the rules of a file in one combined pass (see ``porter.engine.stages.rule_pass``), so a rule must not
keep state across files (a fresh instance is made per file) and never prints or writes:
it records :class:`Finding` objects through :meth:`Rule.rewrite` and :meth:`Rule.flag`.

What a file must hold before a rule can match there is one declaration,
``needs = Needs(targets=..., methods=..., calls_only=...)`` (``porter.rulebase.needs``). The
engine reads it to skip files and functions cheaply; the rule never consults that
pre-filter, and its output never depends on whether the pre-filter ran.

A rule knows the file it runs on only as a :class:`RuleContext`, never the engine.
"""

from __future__ import annotations

import inspect
import re
from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import Any, ClassVar, Mapping, Optional, Protocol, Sequence, Union

import libcst as cst
from libcst.metadata import CodeRange

from porter.rulebase.matching import Resolver
from porter.rulebase.needs import Needs
from porter.rulebase.trivia import comments_in, keep_comments

RUNTIME = "porter_runtime"

#: What rules once declared one class variable each; now fields of ``Needs``.
_RETIRED = frozenset({"targets", "methods", "words", "strings", "calls_only", "byte_pattern",
                      "whole_file", "syntax_filter", "unit_filter"})


class Safety(str, Enum):
    #: The rewrite means exactly the same on CUDA; applied by default.
    SAFE = "safe"
    #: No rewrite: a human must decide. The rule only records findings.
    REVIEW = "review"
    #: A rewrite that may change behaviour on CUDA; applied only with --unsafe-fixes.
    UNSAFE = "unsafe"


#: The severity of a note: reported "For information", never counted as needing a human.
INFO = "info"


@dataclass(frozen=True)
class Finding:
    """One rewrite or one item for a human. Plain, picklable data."""

    code: str
    rule: str
    path: str
    line: int
    column: int
    action: str  # "rewrite" | "review"
    message: str
    before: str = ""
    after: str = ""
    suggestion: str = ""
    #: "" for an item a human must act on; "info" for a note that blocks nothing (a
    #: speed note, a finding in code that only runs where CUDA is): listed, never counted
    #: as needing a human, and --check does not fail on it.
    severity: str = ""

    @property
    def needs_human(self) -> bool:
        return self.action == "review" and self.severity != INFO

    def to_dict(self) -> dict:
        data = asdict(self)
        if not data["severity"]:
            del data["severity"]  # the report's items keep their schema-1 keys
        return data


def one_line(code: str, limit: int = 160) -> str:
    """Code as a finding's ``before`` / ``after`` shows it: whitespace runs made one
    space, cut at ``limit`` characters."""
    text = " ".join(code.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


@dataclass(frozen=True)
class Example:
    """An invalid example: ``before`` must become ``after`` (None: finding only).

    ``path`` is the file name the example is migrated as (text rules match by name).
    ``line`` and ``message``, when given, name the line of one of the rule's findings
    and a fragment of its message.
    """

    before: str
    after: Optional[str] = None
    path: str = "example.py"
    line: Optional[int] = None
    message: str = ""
    #: The other modules of the example's repository, (path, code) each: the example is
    #: then migrated with the project model (porter.project) of all of them.
    project: tuple[tuple[str, str], ...] = ()


@dataclass
class RuleDoc:
    summary: str
    sections: dict[str, str] = field(default_factory=dict)


#: What may separate the parts of a call in source bytes: whitespace, line
#: continuations, comments (possessive, so a regex never backtracks into it). For
#: ``Needs.byte_patterns`` and the byte pre-filter's call check.
BYTES_GAP = rb"(?:[\s\\]++|#[^\r\n]*+)*+"


class WholeFile(Exception):
    """Raised while migrating a module with some definitions left out (the engine's
    segments) when only the whole file gives the exact answer: the engine then parses
    the whole file. Raised by the rule context and by the import clean-up."""


class RuleContext(Protocol):
    """What a rule may use of the file it runs on (the engine's ``FileContext`` is one).

    The rule base defines it so that rules depend on this page, not on the engine that
    runs them: the engine hands the rule what it needs, the rule hands back records.
    """

    #: The module the rules walk (whole, or with some definitions stubbed).
    module: cst.Module
    #: The file's own bytes, for file-wide evidence.
    source: bytes
    #: Which imported thing a name or attribute chain stands for.
    resolver: Resolver
    unsafe_fixes: bool
    #: The file's path relative to the root, "/" separators.
    path: str
    #: The repository-wide model (porter.project.model.ProjectModel), or None for a file alone.
    project: Any
    #: Set by a rule whose rewrite calls the runtime: the engine adds its import.
    needs_runtime: bool

    def record(self, rule: Any, node: cst.CSTNode, action: str, message: str, *,  # action: rewrite | review | note
               after: Optional[cst.CSTNode] = None, suggestion: str = "") -> None: ...

    def suppressed(self, node: cst.CSTNode, code: str) -> bool: ...

    def keeps(self, node: cst.CSTNode) -> bool: ...

    def code_for(self, node: cst.CSTNode) -> str: ...

    def positions(self) -> Mapping[cst.CSTNode, CodeRange]: ...

    def see_all_uses_of(self, names: Sequence[str]) -> None:
        """For a rule that counts uses over ``module``: make sure every use of ``names``
        is in it (a definition the engine left out may hold one: then the rules run
        again over the whole file)."""

    def see_whole_file(self, why: str) -> None:
        """For a rule that needs the whole file only at some nodes: from here on, the
        answer needs the definitions the engine left out (the rules run again over the
        whole file)."""


class BaseRule:
    """What every rule has: identity, safety, documentation and examples."""

    code: ClassVar[str]
    name: ClassVar[str]
    safety: ClassVar[Safety] = Safety.SAFE
    #: "info" for a review rule whose findings are notes that block nothing (PT801's
    #: speed notes): they are reported, never counted as needing a human.
    severity: ClassVar[str] = ""
    #: True for a rule whose finding in the CUDA arm of a device split (``torch.cuda.FloatTensor
    #: if x.is_cuda else torch.FloatTensor``) is about the split itself: the other arm runs off
    #: CUDA, so the finding stays one for a human there (porter.engine.stages.notes).
    device_split: ClassVar[bool] = False
    #: True for a rule whose finding states a CUDA requirement (``assert x.is_cuda``) rather
    #: than uses CUDA: in a module whose top level imports a CUDA-only package porter left
    #: as is, that import already states it, so the finding is a note (porter.engine.stages.notes).
    restates_requirement: ClassVar[bool] = False
    #: True for a rule whose finding is about a setting that many files repeat (torchtune's
    #: 196 configs with ``device: cuda``): the code that reads it is where a human acts, once,
    #: so the first file's finding stands for all and the others are notes (porter.engine.stages.notes).
    repeated_setting: ClassVar[bool] = False
    valid: ClassVar[Sequence[Union[str, Example]]] = ()
    invalid: ClassVar[Sequence[Example]] = ()

    @classmethod
    def doc(cls) -> RuleDoc:
        return parse_doc(inspect.getdoc(cls) or "")

    @classmethod
    def summary(cls) -> str:
        return cls.doc().summary


class Rule(BaseRule):
    """Base class of the rules for Python source (LibCST transformers)."""

    #: What a file must hold for the rule to match there: the one declaration the
    #: engine's pre-filter reads (``porter.rulebase.needs``). The rule never reads the
    #: pre-filter back.
    needs: ClassVar[Needs] = Needs()
    #: Qualified names the rule matches: ``needs.targets``, set for every subclass.
    targets: ClassVar[frozenset[str]] = frozenset()

    def __init_subclass__(cls, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        stale = sorted(_RETIRED & vars(cls).keys())
        if stale:  # the pre-filter would ignore them: fail loudly, not skip silently
            raise TypeError(f"{cls.__name__}: declare {', '.join(stale)} in `needs = Needs(...)`")
        cls.targets = cls.needs.targets

    def __init__(self, ctx: RuleContext) -> None:
        self.ctx = ctx

    # -- matching helpers --------------------------------------------------
    def qualname(self, node: cst.BaseExpression) -> Optional[str]:
        """Resolved qualified name of ``node`` (an original node), or None."""
        return self.ctx.resolver.qualname(node)

    def matches(self, node: cst.BaseExpression, *names: str) -> Optional[str]:
        """The target among ``names`` (default: ``self.targets``) that ``node`` names."""
        found = self.qualname(node)
        if found is None:
            return None
        wanted = names or tuple(self.targets)
        return found if found in wanted else None

    # -- recording ---------------------------------------------------------
    def rewrite(
        self,
        original: cst.CSTNode,
        replacement: cst.CSTNode,
        message: str,
        *,
        suggestion: str = "",
    ) -> cst.CSTNode:
        """Record a rewrite of ``original`` and return ``replacement``, with every
        comment of ``original`` the replacement dropped put back in (porter.rulebase.trivia)."""
        if self.ctx.suppressed(original, self.code) or self.ctx.keeps(original):
            return original
        if self.safety is Safety.UNSAFE and not self.ctx.unsafe_fixes:
            self.flag(original, message, suggestion=suggestion or self.ctx.code_for(replacement))
            return original
        replacement = keep_comments(original, replacement)
        self.ctx.record(self, original, "rewrite", message, after=replacement, suggestion=suggestion)
        return replacement

    def flag(self, node: cst.CSTNode, message: str, *, suggestion: str = "") -> None:
        """Record a finding that a human must act on."""
        if self.ctx.suppressed(node, self.code):
            return
        self.ctx.record(self, node, "review", message, suggestion=suggestion)

    def note(self, node: cst.CSTNode, message: str, *, suggestion: str = "") -> None:
        """Record a finding that blocks nothing (severity "info"): listed, never counted
        as needing a human."""
        if self.ctx.suppressed(node, self.code):
            return
        self.ctx.record(self, node, "note", message, suggestion=suggestion)

    # -- building runtime calls -------------------------------------------
    def runtime(self, attr: str) -> cst.Attribute:
        """``porter_runtime.<attr>``, scheduling the runtime import."""
        self.ctx.needs_runtime = True
        return cst.Attribute(cst.Name(RUNTIME), cst.Name(attr))

    def runtime_call(self, attr: str, *args: Union[cst.Arg, cst.BaseExpression]) -> cst.Call:
        """``porter_runtime.<attr>(*args)``."""
        built = [a if isinstance(a, cst.Arg) else cst.Arg(a) for a in args]
        return cst.Call(self.runtime(attr), args=_clean_args(built))


@dataclass(frozen=True)
class TextFinding:
    """What a text rule reports: 1-based line and column, and the usual fields."""

    line: int
    column: int
    message: str
    before: str = ""
    after: str = ""
    suggestion: str = ""
    rewrite: bool = False
    #: "info" for a note that blocks nothing (see Finding.severity)
    severity: str = ""


#: The file names of the text rules' two kinds of file: configs and shell scripts.
CONFIG_PATTERNS = ("*.yaml", "*.yml", "*.json", "*.toml", "*.cfg", "*.ini")
SHELL_PATTERNS = ("*.sh", "*.bash", "*.zsh", "*.slurm", "*.sbatch")


class TextRule(BaseRule):
    """Base class of the rules for files that are not Python source (configs, shell
    scripts, dependency manifests). A text rule sees the decoded text of files whose
    name matches one of ``patterns`` and contains every one of ``words``."""

    #: fnmatch patterns on the file name (``*.yaml``, ``requirements*.txt``).
    patterns: ClassVar[tuple[str, ...]] = ()
    words: ClassVar[frozenset[str]] = frozenset()
    #: Where CUDA-only dependencies go ("marker" or "extra"); the engine sets it from
    #: the settings (``[tool.porter] dependencies``) for every run.
    dependencies: str = "marker"
    #: The repository-wide model (porter.project), or None for one file alone.
    project: Optional[Any] = None

    def __init__(self, path: str) -> None:
        self.path = path
        self.findings: list[TextFinding] = []

    def check(self, text: str) -> str:
        """Return the new text (``text`` itself when nothing changes); record findings."""
        raise NotImplementedError

    def flag(self, line: int, message: str, *, column: int = 1, before: str = "", suggestion: str = "",
             severity: str = "") -> None:
        self.findings.append(TextFinding(line, column, message, before=before.strip(), suggestion=suggestion,
                                         severity=severity))

    def changed(self, line: int, before: str, after: str, message: str) -> None:
        self.findings.append(TextFinding(line, 1, message, before=before.strip(), after=after.strip(), rewrite=True))


def _clean_args(args: list[cst.Arg]) -> list[cst.Arg]:
    """Arguments separated by ", " with no trailing comma; a comma followed by a comment
    stays as written (its line break and comment with it)."""
    out = []
    for i, arg in enumerate(args):
        last = i == len(args) - 1
        comma = cst.MaybeSentinel.DEFAULT if last else cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
        if isinstance(arg.comma, cst.Comma) and comments_in(arg.comma):
            comma = arg.comma
        out.append(arg.with_changes(comma=comma))
    return out


def clean_args(args: Sequence[cst.Arg]) -> list[cst.Arg]:
    """Public form of :func:`_clean_args` for rules that rebuild argument lists."""
    return _clean_args(list(args))


_SECTION = re.compile(r"^(What|Why|Fix safety|Known limits|Example)s?:?\s*$", re.M)


def parse_doc(text: str) -> RuleDoc:
    """Split a rule docstring into its summary line and its named sections."""
    summary, _, rest = text.partition("\n")
    sections: dict[str, str] = {}
    parts = _SECTION.split(rest)
    for heading, body in zip(parts[1::2], parts[2::2]):
        sections[heading] = inspect.cleandoc(body)
    return RuleDoc(summary.strip(), sections)


def string_value(node: cst.CSTNode) -> Optional[str]:
    """The value of a plain (non f-) string literal, else None."""
    if isinstance(node, cst.SimpleString):
        value = node.evaluated_value
        return value if isinstance(value, str) else None
    if isinstance(node, cst.ConcatenatedString):
        value = node.evaluated_value
        return value if isinstance(value, str) else None
    return None


def _unformatted(node: cst.FormattedString) -> Optional[str]:
    """The text of an f-string with no replacement field and no escape, else None."""
    if not all(isinstance(p, cst.FormattedStringText) for p in node.parts):
        return None
    text = "".join(p.value for p in node.parts)
    return None if any(c in text for c in "\\{}") else text


#: A literal CUDA device spec; also a ``Needs.strings`` pattern.
CUDA_SPEC = re.compile(r"^cuda(?::(\d+))?$")


def cuda_spec(node: cst.CSTNode) -> Optional[tuple[Optional[int]]]:
    """``("cuda",)`` literal → ``(None,)``; ``"cuda:1"`` → ``(1,)``; anything else None.
    An f-string with nothing to format (``f"cuda"``, left over from an edit) is its text."""
    value = string_value(node) if not isinstance(node, cst.FormattedString) else _unformatted(node)
    if value is None:
        return None
    match = CUDA_SPEC.match(value)
    if match is None:
        return None
    return (int(match.group(1)) if match.group(1) is not None else None,)


def keyword(call: cst.Call, name: str) -> Optional[cst.Arg]:
    for arg in call.args:
        if arg.keyword is not None and arg.keyword.value == name:
            return arg
    return None


def positional(call: cst.Call) -> list[cst.Arg]:
    return [a for a in call.args if a.keyword is None and not a.star]


def has_star_args(call: cst.Call) -> bool:
    return any(a.star for a in call.args)
