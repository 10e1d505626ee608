"""The project model: what the whole repository tells the rules of one file (issues 26, 27).

Built once per run, before the per-file pass (``porter.engine.run``), from the bytes of the
tree's Python sources, and handed to every file (and every worker process) as plain
picklable data inside the run's options, so the output is the same for any ``-j``.
Rules read it through ``ctx.project`` and the questions below; a rule run on one file
alone (the rule examples without a ``project``) gets None and keeps its per-file view.

What it knows:

- every module: its file and dotted name (``a/b/c.py`` is ``a.b.c``, and ``b.c`` and
  ``c`` for the scripts that put its folder on ``sys.path``);
- which names other modules read from each module (``from pkg import GradScaler``,
  ``import pkg`` then ``pkg.GradScaler``, ``from pkg import *`` then ``GradScaler``): an
  import the import clean-up must keep even when this file no longer uses it;
- the classes that define (or inherit from another class of the repository) their own
  ``cuda`` or ``to``: a ``.cuda()`` on one of them must not become ``.to()``;
- the device values of :mod:`porter.project.value_flow`.

Cost: the imports and classes are byte searches over every source; only the files the
value flow needs are parsed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Mapping, Optional

from porter.files.apply import read_or_none
from porter.project.cuda_gated import cuda_gated_modules
from porter.project.flags import cuda_device_options, import_probes, opt_in_options, unread_flags
from porter.project.import_fallbacks import caught_triton_modules
from porter.project.known_modules import extension_importers, extension_names
from porter.project.loaders import mapped_wrappers
from porter.project.unreached import other_vendor_modules, unreached_modules, vendored_copy
from porter.project.value_flow import FlowFacts, Kind, Scope
from porter.project.value_flow import build as build_flow
from porter.rulebase.cuda_packages import COMPILED

#: The methods whose override a rewrite must not skip.
OVERRIDABLE = ("cuda", "to", "double")


@dataclass
class ProjectModel:
    #: file (relative, "/" separators) -> its dotted module name
    modules: dict[str, str] = field(default_factory=dict)
    #: file -> the names other modules of the tree read from it
    exported: dict[str, frozenset[str]] = field(default_factory=dict)
    #: class name -> which of ``OVERRIDABLE`` it defines or inherits from a class of the tree
    overrides: dict[str, frozenset[str]] = field(default_factory=dict)
    flow: FlowFacts = field(default_factory=FlowFacts)
    #: every part of every module's dotted name: what an import of the tree's own code starts with
    roots: frozenset[str] = frozenset()
    #: attributes set from ``torch.cuda.is_available()`` and read nowhere (porter.project.flags)
    unread_flags: frozenset[str] = frozenset()
    #: functions that return False where their import of a CUDA-only package fails (porter.project.flags)
    import_probes: frozenset[str] = frozenset()
    #: (file, function): ``torch.load`` wrappers every caller passes ``map_location`` (porter.project.loaders)
    mapped_wrappers: frozenset[tuple[str, str]] = frozenset()
    #: files only code run where CUDA is imports (porter.project.cuda_gated)
    cuda_gated: frozenset[str] = frozenset()
    #: files importing Triton whose import failure another module catches (porter.project.import_fallbacks)
    caught_triton: frozenset[str] = frozenset()
    #: files nothing of the tree reaches: no script, test, notebook, config or import (porter.project.unreached)
    unreached: frozenset[str] = frozenset()
    #: file -> which other accelerator's backend it is (porter.project.unreached)
    other_vendor: dict[str, str] = field(default_factory=dict)
    #: a class of the tree derives from Trainer's arguments (``TrainingArguments``, TRL's
    #: ``SFTConfig``...), or a parser of the tree fills one: TP708 makes the class's
    #: ``__post_init__`` call porter_runtime.training_arguments, TP709 the parser's class
    trainer_arguments_class: bool = False
    #: some module names Trainer's arguments at all (``TrainingArguments``, ``HfArgumentParser``,
    #: TRL's configs): without one, ``--deepspeed`` / ``--tf32`` on a launch line are the
    #: script's own options (Baichuan-7B's DeepSpeed engine script), not Trainer's (TP706)
    trainer_options: bool = False
    #: the tree sets a CUDA default tensor type (``torch.set_default_tensor_type(torch.cuda.FloatTensor)``):
    #: PT912 gives the legacy ``torch.Tensor([...])`` constructors of the tree the default device
    cuda_default_type: bool = False
    #: the tree's Lightning checkpoint loads may get a map_location: a class derives from
    #: ``LightningModule`` and none defines its own ``load_from_checkpoint`` (TP404)
    lightning_loads: bool = False
    #: options the tree's commands give a CUDA device (``--device "cuda"`` in a README; porter.project.flags)
    cuda_device_options: frozenset[str] = frozenset()
    #: the files that import, at module level, a compiled CUDA extension: one the tree's
    #: setup.py builds or a known one (``selective_scan_cuda``): TP608's files
    extension_importers: frozenset[str] = frozenset()
    #: the import names of the CUDA extensions the tree's setup.py files build
    built_extensions: frozenset[str] = frozenset()
    #: a YAML config of the tree builds a Lightning Trainer (``_target_: pytorch_lightning.Trainer``),
    #: which ``hydra.utils.instantiate(config.trainer)`` makes (TP403)
    lightning_trainer_configs: bool = False
    #: dest -> option of each ``store_true`` option no command of the tree turns on (porter.project.flags):
    #: code under ``if args.<dest>:`` runs only for a user who asks (porter.engine.stages.notes). Whole trees only
    opt_in_options: dict[str, str] = field(default_factory=dict)
    #: the folders of nested projects (_nested_bases), found once
    _bases: Optional[tuple] = field(default=None, repr=False, compare=False)

    def read_elsewhere(self, rel: str, name: str) -> bool:
        """Whether another module of the tree reads ``name`` from the module ``rel``."""
        return name in self.exported.get(rel, ())

    def provides(self, module: str) -> bool:
        """Whether an absolute import of ``module`` (dotted) reaches the tree's own code: its
        first name is a package of the tree (a folder with ``__init__.py``) or a module file
        at the root, or under ``src/`` or ``python/`` (the layouts a build installs from).
        A repository that holds kernels is not a CUDA-only package to itself."""
        top = module.split(".")[0]
        return any(f"{base}{top}{tail}" in self.modules
                   for base in ("", "src/", "python/", *self._nested_bases()) for tail in ("/__init__.py", ".py"))

    def caught_module(self, module: str) -> bool:
        """Whether an absolute import of ``module`` reaches a file of ``caught_triton``: a
        module of the tree left to fail where Triton is absent, its importers catching it."""
        return any(self.modules.get(rel, "") == module or self.modules.get(rel, "").endswith("." + module)
                   for rel in self.caught_triton)

    def _nested_bases(self) -> tuple[str, ...]:
        """The folders of the projects inside the tree that build on their own (a setup.py
        beside the package: Vim's ``mamba-1p1p1/`` vendors ``mamba_ssm``), and their ``src/``."""
        if self._bases is None:
            found = sorted({rel[:-len("setup.py")] for rel in self.modules if rel.endswith("/setup.py")})
            self._bases = tuple(base + tail for base in found for tail in ("", "src/"))
        return self._bases

    def never_runs_here(self, rel: str) -> str:
        """Why the module ``rel`` never runs on a Mac as the tree is written, or "": the tree
        imports it only where CUDA is, nothing of the tree reaches it, or it is another
        accelerator's backend. What porter finds there is for information (porter.engine.stages.notes)."""
        if rel in self.cuda_gated:
            return "the tree imports this module only in code run where CUDA is"
        if rel in self.unreached and vendored_copy(rel):
            return (f"this module is part of the copy of another project at `{vendored_copy(rel)}`, and nothing "
                    "of the tree outside the copy imports or runs it")
        if rel in self.unreached:
            return "no script, test, notebook, config or module of the tree imports or runs this module"
        vendor = self.other_vendor.get(rel)
        return f"this module is {vendor}, which neither a Mac nor CUDA runs" if vendor else ""

    def overrides_method(self, class_name: str, method: str) -> bool:
        return method in self.overrides.get(class_name, ())

    def defines_method(self, method: str) -> bool:
        """Whether some class of the tree defines ``method`` (one of ``OVERRIDABLE``)."""
        return any(method in methods for methods in self.overrides.values())

    def name_kind(self, scope: Scope, name: str) -> Optional[Kind]:
        return self.flow.name_kind(scope, name)

    def attr_kind(self, attr: str) -> Optional[Kind]:
        return self.flow.attrs.get(attr)


def module_name(rel: str) -> str:
    parts = rel[:-3].split("/") if rel.endswith(".py") else rel.split("/")
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def build(root: Path, rels: Iterable[str], whole: bool = False) -> ProjectModel:
    """The model of the tree at ``root`` (``rels``: its files, relative). ``whole``: ``rels``
    are all of the tree's files, so that what none of them reaches can be told."""
    sources: dict[str, bytes] = {}
    texts: dict[str, bytes] = {}
    for rel in rels:
        if not rel.endswith(".py") and not whole:
            continue  # the other texts only tell what nothing reaches
        data = read_or_none(root / rel, _TEXT_LIMIT if not rel.endswith(".py") else 64 << 20)
        if data is not None:
            (sources if rel.endswith(".py") else texts)[rel] = data
    if not whole:
        return build_from(sources)
    for path in sorted(p for pattern in _README_PATTERNS for p in root.glob(pattern)):
        data = read_or_none(path, _TEXT_LIMIT) if path.is_file() else None
        if data is not None:
            texts.setdefault(path.name, data)
    return build_from(sources, texts)


#: The texts beside the sources that may name a module (a README's ``python -m`` line),
#: read at the tree's top; larger files (data) are not read for it.
_README_PATTERNS = ("*.md", "*.rst", "*.txt", "Makefile", "Dockerfile", "*.cfg")
_TEXT_LIMIT = 1 << 20


def build_from(sources: Mapping[str, bytes], texts: Optional[Mapping[str, bytes]] = None) -> ProjectModel:
    """The model of ``sources``; with the tree's other ``texts`` (its configs, scripts,
    notebooks and READMEs: the sources are then the whole tree's), what nothing reaches."""
    modules = {rel: module_name(rel) for rel in sorted(sources)}
    roots = frozenset(part for name in modules.values() for part in name.split("."))
    index = _Index(modules)
    built = _built_extensions(sources)
    unreached = frozenset() if texts is None else unreached_modules(
        sources, modules, lambda rel, data: _import_targets(index, rel, data),
        {rel: data for rel, data in texts.items() if not rel.endswith(".ipynb")},
        {rel: data for rel, data in texts.items() if rel.endswith(".ipynb")})
    return ProjectModel(modules=modules, exported=_exports(sources, modules),
                        overrides=_overrides(sources), flow=build_flow(sources), roots=roots,
                        unread_flags=unread_flags(sources), import_probes=import_probes(sources),
                        mapped_wrappers=mapped_wrappers(sources, modules),
                        cuda_gated=cuda_gated_modules(sources, modules),
                        caught_triton=caught_triton_modules(sources, modules), unreached=unreached,
                        other_vendor=other_vendor_modules(sources),
                        trainer_arguments_class=any(_TRAINER_ARGUMENTS.search(data) for data in sources.values()),
                        trainer_options=any(_TRAINER_OPTIONS.search(data) for data in sources.values()),
                        cuda_default_type=any(sets_cuda_default_type(data) for data in sources.values()),
                        cuda_device_options=cuda_device_options({**sources, **(texts or {})}),
                        lightning_loads=lightning_loads(sources),
                        built_extensions=frozenset(built),
                        lightning_trainer_configs=any(_LIGHTNING_TARGET.search(data) for rel, data in (texts or {}).items()
                                                      if rel.endswith((".yaml", ".yml"))),
                        extension_importers=extension_importers(sources, built | set(COMPILED)),
                        opt_in_options={} if texts is None else opt_in_options(sources, texts))


def _built_extensions(sources: Mapping[str, bytes]) -> set[str]:
    return {name for rel, data in sources.items() if rel.rsplit("/", 1)[-1] == "setup.py"
            for name in extension_names(data.decode("utf-8", "replace"))}


def _import_targets(index: "_Index", rel: str, data: bytes) -> list[str]:
    """The files of the tree each import of ``data`` (read as the module ``rel``) may
    mean; ``import a.b.c`` also means ``a`` and ``a.b``, which Python imports first."""
    froms, plain = _imports(data)
    found: list[str] = []
    for base, names in froms:
        if names and all(name == "porter_runtime" for name, _ in names):
            continue  # porter's own import of the runtime copy: no import of the tree's (a second run's reach is the first's)
        found += index.resolve(rel, base)
        for name, _ in names:
            if name != "*":
                found += index.resolve(rel, f"{base}.{name}" if base.strip(".") else base + name)
    for name, _ in plain:
        parts = name.split(".")
        for end in range(1, len(parts) + 1):
            found += index.resolve(rel, ".".join(parts[:end]))
    return found


#: ``class Args(transformers.TrainingArguments):``, ``class TrainingArguments(
#: transformers.TrainingArguments)``, ``class ScriptArguments(SFTConfig):``: the classes TP708 hooks.
#: ``set_default_tensor_type(torch.cuda.FloatTensor)`` / ``('torch.cuda.HalfTensor')`` / ``(t.cuda.DoubleTensor)``,
#: in source whose comments :func:`sets_cuda_default_type` took out.
CUDA_DEFAULT_TYPE = re.compile(rb"set_default_tensor_type\s*\(\s*['\"]?[\w.\s]*?\bcuda\s*\.\s*\w*Tensor")


def sets_cuda_default_type(data: bytes) -> bool:
    """Whether ``data`` calls ``set_default_tensor_type`` with a CUDA type (comments and
    line breaks inside the call allowed)."""
    return b"set_default_tensor_type" in data and \
        CUDA_DEFAULT_TYPE.search(re.sub(rb"#[^\n]*", b"", data)) is not None
#: ``class Model(pl.LightningModule):`` / ``(L.LightningModule, Mixin)``
_LIGHTNING_MODULE = re.compile(rb"class[ \t]+\w+[ \t]*\([^)]*\bLightningModule\b")
_OWN_LOADER = re.compile(rb"def[ \t]+load_from_checkpoint\b")


def lightning_loads(sources: Mapping[str, bytes]) -> bool:
    """A class of the tree derives from ``LightningModule`` and no module defines its own
    ``load_from_checkpoint`` (whose parameters porter could not know)."""
    lightning = any(b"LightningModule" in d and _LIGHTNING_MODULE.search(d) for d in sources.values())
    return lightning and not any(b"load_from_checkpoint" in d and _OWN_LOADER.search(d) for d in sources.values())


_TRAINER_ARGUMENTS = re.compile(
    rb"(?:class[ \t]+\w+|HfArgumentParser|TrlParser)[ \t]*\([^)]*\b(?:Seq2Seq)?"
    rb"(?:TrainingArguments|SFTConfig|DPOConfig|GRPOConfig|RewardConfig|ORPOConfig|KTOConfig)\b")


_LIGHTNING_TARGET = re.compile(rb"""^\s*_target_\s*:\s*["']?(?:pytorch_lightning|lightning\.pytorch|lightning)"""
                               rb"""(?:\.trainer(?:\.trainer)?)?\.Trainer\b""", re.M)
_TRAINER_OPTIONS = re.compile(
    rb"\b(?:(?:Seq2Seq)?TrainingArguments|HfArgumentParser|TrlParser|(?:SFT|DPO|GRPO|Reward|ORPO|KTO)Config)\b")


# -- which names other modules read ----------------------------------------------

#: Literal first (the regex engine then scans for it at C speed); that the word starts a
#: line is checked after (``_starts_line``).
_FROM = re.compile(rb"from[ \t]+(\.*[\w.]*)[ \t]+import[ \t]+(\([^)]*\)|[^\n#;]*)")
_IMPORT = re.compile(rb"import[ \t]+([\w. \t,]+)")


def _starts_line(data: bytes, at: int) -> bool:
    line = data.rfind(b"\n", 0, at) + 1
    return not data[line:at].strip()


def _imports(data: bytes) -> tuple[list[tuple[str, list[tuple[str, str]]]], list[tuple[str, str]]]:
    """(module, [(name, bound as)]) of each ``from`` import, and (module, bound as) of
    each plain ``import``, anywhere in the file."""
    froms = [(m.group(1).decode(), _names(m.group(2))) for m in _FROM.finditer(data) if _starts_line(data, m.start())]
    plain = [pair for m in _IMPORT.finditer(data) if _starts_line(data, m.start()) for pair in _names(m.group(1))]
    return froms, plain


class _Index:
    """Dotted name (and each of its dotted tails) -> the files that may be that module."""

    def __init__(self, modules: Mapping[str, str]) -> None:
        self.by_name: dict[str, list[str]] = {}
        for rel, dotted in modules.items():
            parts = dotted.split(".") if dotted else []
            for start in range(len(parts)):
                self.by_name.setdefault(".".join(parts[start:]), []).append(rel)

    def resolve(self, importer: str, dotted: str) -> list[str]:
        if dotted.startswith("."):
            level = len(dotted) - len(dotted.lstrip("."))
            package = module_name(importer).split(".")
            if not importer.endswith("__init__.py"):
                package = package[:-1]
            base = package[: len(package) - (level - 1)] if level > 1 else package
            dotted = ".".join([*base, dotted.lstrip(".")]).strip(".")
            return [r for r in self.by_name.get(dotted, []) if module_name(r) == dotted] or self.by_name.get(dotted, [])
        return self.by_name.get(dotted, [])


def _names(clause: bytes) -> list[tuple[str, str]]:
    """(name, bound as) of ``a, b as c`` / ``(a,\n b)``."""
    found = []
    for part in clause.decode("utf-8", "replace").strip("()").replace("\\\n", " ").split(","):
        words = part.split()
        if words:
            found.append((words[0], words[2] if len(words) == 3 and words[1] == "as" else words[0]))
    return found


def _exports(sources: Mapping[str, bytes], modules: Mapping[str, str]) -> dict[str, frozenset[str]]:
    """File -> the names it binds by import that another module reads from it: the only
    names the import clean-up could remove."""
    index = _Index(modules)
    imports = {rel: _imports(data) for rel, data in sources.items()}
    bound = {rel: {b for _, names in froms for _, b in names if b != "*"} | {b.split(".")[0] for _, b in plain}
             for rel, (froms, plain) in imports.items()}
    read: dict[str, set[str]] = {}
    for rel, (froms, plain) in sorted(imports.items()):
        data = sources[rel]
        as_module: list[tuple[str, str]] = []  # (name bound here, a module of the tree it stands for)
        for base, names in froms:
            targets = [t for t in index.resolve(rel, base) if t != rel]
            for name, alias in names:
                for target in targets:
                    found = read.setdefault(target, set())
                    if name == "*":
                        found.update(n for n in bound[target] if n.encode() in data)
                    elif name in bound[target]:
                        found.add(name)
                sub = index.resolve(rel, f"{base}.{name}" if base.strip(".") else base + name)
                as_module += [(alias, t) for t in sub if t != rel and name != "*"]
        as_module += [(alias, t) for name, alias in plain for t in index.resolve(rel, name) if t != rel]
        for alias, target in as_module:
            read.setdefault(target, set()).update(n for n in bound[target] if f"{alias}.{n}".encode() in data)
    return {rel: frozenset(names) for rel, names in read.items() if names}


# -- classes with their own cuda() / to() ----------------------------------------

_CLASS = re.compile(rb"class[ \t]+(\w+)[ \t]*(?:\(([^)]*)\))?[ \t]*:")
_DEF = re.compile(rb"def[ \t]+(" + b"|".join(m.encode() for m in OVERRIDABLE) + rb")[ \t]*\(")


def _overrides(sources: Mapping[str, bytes]) -> dict[str, frozenset[str]]:
    """Classes that define ``cuda`` / ``to``, then (to a fixpoint) their subclasses."""
    own: dict[str, set[str]] = {}
    bases: dict[str, set[str]] = {}
    for data in sources.values():
        if b"class" not in data:
            continue
        classes = [(m, _indent(data, m.start())) for m in _CLASS.finditer(data) if _starts_line(data, m.start())]
        for match, _ in classes:
            bases.setdefault(match.group(1).decode(), set()).update(
                b.strip().rsplit(".", 1)[-1] for b in (match.group(2) or b"").decode().split(",") if b.strip())
        for method in _DEF.finditer(data):
            if _starts_line(data, method.start()):
                owner = _enclosing_class(classes, method.start(), _indent(data, method.start()))
                if owner:
                    own.setdefault(owner, set()).add(method.group(1).decode())
    changed = True
    while changed:
        changed = False
        for name, parents in bases.items():
            inherited = set().union(*(own.get(p, set()) for p in parents if p != name))
            if not inherited <= own.get(name, set()):
                own.setdefault(name, set()).update(inherited)
                changed = True
    return {name: frozenset(methods) for name, methods in own.items()}


def _indent(data: bytes, at: int) -> int:
    return at - data.rfind(b"\n", 0, at) - 1


def _enclosing_class(classes: list, offset: int, indent: int) -> str:
    """The last class statement before ``offset`` indented less than the ``def``."""
    for match, depth in reversed(classes):
        if match.start() < offset and depth < indent:
            return match.group(1).decode()
    return ""
