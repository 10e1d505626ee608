"""The text stage: files that are not Python source (configs, shell scripts,
dependency manifests) through the text rules whose patterns match their names."""

from __future__ import annotations

from porter.engine.options import Options
from porter.engine.results import FileResult, SourceResult
from porter.rulebase.rule import Finding


def migrate_text(data: bytes, options: Options, *, path: str) -> SourceResult:
    """Apply the text rules matching ``path``'s name to a non-Python file's bytes."""
    name = path.rsplit("/", 1)[-1]
    rules = [r for r in options.text_rules_for(name) if all(w.encode() in data for w in r.words)]
    if not rules:
        return SourceResult(data, [])
    bom = data.startswith(b"\xef\xbb\xbf")
    text = data[3 if bom else 0:].decode("utf-8")
    findings: list[Finding] = []
    for rule_class in rules:
        rule = rule_class(path)
        rule.dependencies = options.dependencies
        rule.project = options.project
        text = rule.check(text)
        findings += [
            Finding(rule.code, rule.name, path, f.line, f.column, "rewrite" if f.rewrite else "review",
                    f.message, f.before, f.after, f.suggestion, "" if f.rewrite else f.severity or rule.severity)
            for f in rule.findings
        ]
    findings.sort(key=lambda f: (f.line, f.column, f.code))
    return SourceResult((b"\xef\xbb\xbf" if bom else b"") + text.encode("utf-8"), findings)


def process_text(data: bytes, rel: str, options: Options, bootstrap: object = None) -> FileResult:
    """Migrate one text file (``bootstrap`` is unused: no text file imports the runtime)."""
    try:
        result = migrate_text(data, options, path=rel)
    except UnicodeDecodeError as exc:
        return FileResult(rel, "error", error=f"cannot decode as utf-8: byte 0x{data[exc.start]:02x}")
    except Exception as exc:  # a bug in porter: report it for this file, go on
        return FileResult(rel, "error", error=f"internal error: {type(exc).__name__}: {exc}")
    if result.new == data:
        return FileResult(rel, "unchanged", findings=result.findings)
    return FileResult(rel, "changed", findings=result.findings, old=data, new=result.new)
