"""Whether a NumPy array is known to be float64, and what made it so (PT605).

``torch.from_numpy(a).to(device)`` fails on MPS only when ``a`` is float64. Where the
array's dtype can't be known from the code (a parameter no caller here gives a float64,
a file's contents, a dataset's items), PT605 lists a note: a reviewer can't act on "it
might be". Where the code shows a float64 maker, it is a finding that needs a human,
and the message says which maker. Known makers:

- NumPy's float constructors with no dtype: ``np.zeros``, ``np.ones``, ``np.empty``,
  ``np.eye``, ``np.linspace``; a float64 ``dtype`` anywhere (``np.zeros(n, "float64")``,
  ``.astype(np.float64)``); ``np.array`` of float literals;
- random floats: ``np.random.randn`` and the like, also on a ``RandomState`` or a
  ``default_rng`` generator;
- what NumPy keeps float64 from a float64 argument: its functions (``np.sqrt``,
  ``np.cumprod``, ``np.linalg.qr``), arithmetic, an array's own methods, true division
  of an integer array (``np.array(img) / 255.0``).

A value is followed through the names and ``self.`` fields it is assigned to, the
returns of the module's own functions (nested ones too), a field of an instance of the
module's own class, or of a library class that keeps float64 fields (gym's
``RunningMeanStd``: ``obs_rms = RunningMeanStd(...)`` then ``obs_rms.mean``), and a
parameter to the arguments its callers in the module pass. "Known" takes one float64
maker among a name's assignments: the move then fails on some path.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Optional, Union

import libcst as cst

from porter.rulebase.families.dtypes.numpy_dtypes import _ASSIGNS, Qualname, _assignments, _kept, _pil_pixels, _spelled
from porter.rulebase.rule import string_value
from porter.rulebase.syntax import argument
from porter.rulebase.walk import code_children, nodes_of

_FLOAT64_NAMES = frozenset({"float64", "double", "float_", "f8", "d", "float", "longdouble"})
#: NumPy makers whose default dtype is float64, with the position of their dtype argument.
_FLOAT_DEFAULT = {"zeros": 1, "ones": 1, "empty": 1, "identity": 1, "eye": 3, "linspace": 5, "logspace": 5,
                  "geomspace": 4}
#: Makers whose dtype is their data's, with the position of the dtype argument.
_FROM_DATA = {"array": 1, "asarray": 1, "ascontiguousarray": 1, "asfarray": 1, "zeros_like": 1, "ones_like": 1,
              "empty_like": 1, "full_like": 2, "copy": -1, "stack": -1, "concatenate": -1, "vstack": -1,
              "hstack": -1}
#: Random float draws (``np.random.<name>``, a RandomState's, a Generator's).
_RANDOM_FLOATS = frozenset({
    "randn", "rand", "random", "random_sample", "ranf", "sample", "normal", "uniform", "standard_normal",
    "exponential", "standard_exponential", "beta", "gamma", "standard_gamma", "laplace", "lognormal",
    "multivariate_normal", "dirichlet", "logistic", "gumbel", "chisquare", "standard_cauchy", "standard_t",
    "vonmises", "wald", "weibull", "triangular", "rayleigh", "power", "pareto"})
_GENERATORS = frozenset({"numpy.random.RandomState", "numpy.random.default_rng", "numpy.random.Generator"})
#: NumPy functions whose result is never float64, whatever they are given.
_NOT_FLOAT = frozenset({"argmax", "argmin", "argsort", "nonzero", "where", "isnan", "isinf", "isfinite",
                        "array_equal", "allclose", "isclose", "equal", "greater", "less", "logical_and",
                        "logical_or", "logical_not", "shape", "size", "ndim", "searchsorted", "digitize",
                        "round_", "floor_divide", "bincount", "unique", "count_nonzero", "histogram"})
#: Array methods whose result is not an array of the receiver's dtype.
_NOT_KEPT = frozenset({"astype", "argmax", "argmin", "argsort", "nonzero", "tolist", "item", "any", "all",
                       "view", "tobytes", "to", "cuda", "cpu", "numpy", "detach", "float", "half", "int", "long"})
#: Library classes that keep float64 fields (their source says so): RL running statistics.
_FLOAT64_FIELDS = {
    "gym.wrappers.normalize.RunningMeanStd": frozenset({"mean", "var"}),
    "gymnasium.wrappers.utils.RunningMeanStd": frozenset({"mean", "var"}),
    "stable_baselines3.common.running_mean_std.RunningMeanStd": frozenset({"mean", "var"}),
}
_MAX_DEPTH = 8

Scope = Union[cst.Module, cst.FunctionDef, cst.ClassDef]  # where a name's assignments are looked up


@dataclass
class _Def:
    node: cst.FunctionDef
    klass: Optional[cst.ClassDef]
    outer: Scope  # the function (or module) it is defined in


@dataclass
class _Site:
    call: cst.Call
    function: Scope
    klass: Optional[cst.ClassDef]


class ModuleIndex:
    """Where each function, class and call of one module is, and what its top level
    assigns: walked once, the first time a search needs it (most searches end at a
    maker in the same function). ``reading_all`` is called before that walk: the engine
    may have left some definitions out (porter.engine.stages.segments), and a search
    that reads the others needs the whole file."""

    def __init__(self, module: cst.Module, reading_all: Optional[Callable[[], None]] = None) -> None:
        self.module = module
        self._reading_all = reading_all
        self._functions: dict[str, list[_Def]] = {}
        self._classes: dict[str, cst.ClassDef] = {}
        #: callee spelled ``f`` or ``self.f`` -> the calls of it
        self._calls: dict[str, list[_Site]] = {}
        self._walked = False
        self._top: Optional[dict[str, list[cst.BaseExpression]]] = None

    def _walk(self) -> None:
        if not self._walked:
            if self._reading_all is not None:
                self._reading_all()
            self._walked = True
            _index(self)

    @property
    def functions(self) -> dict[str, list[_Def]]:
        self._walk()
        return self._functions

    @property
    def classes(self) -> dict[str, cst.ClassDef]:
        self._walk()
        return self._classes

    @property
    def calls(self) -> dict[str, list[_Site]]:
        self._walk()
        return self._calls

    def top_level(self, name: str) -> list[cst.BaseExpression]:
        """What the module's own statements (``if __name__ == "__main__":`` too, not its
        definitions) assign to ``name``."""
        if self._top is None:
            self._top = _assignments(_own_nodes(self.module, _ASSIGNS))
        return self._top.get(name, [])


def _index(index: ModuleIndex) -> None:
    """One walk (porter.rulebase.walk's, not a LibCST visitor: it only gathers) that
    records each function with its class and outer scope, each class, each call."""
    stack: list[tuple[cst.CSTNode, Scope, Optional[cst.ClassDef], Optional[cst.ClassDef]]] = [
        (index.module, index.module, None, None)]
    while stack:
        node, function, direct, outer = stack.pop()
        if isinstance(node, cst.ClassDef):
            index._classes.setdefault(node.name.value, node)
            direct = outer = node
        elif isinstance(node, cst.FunctionDef):
            index._functions.setdefault(node.name.value, []).append(_Def(node, direct, function))
            function, direct = node, None
        elif isinstance(node, cst.Call):
            spelled = _spelled(node.func)
            if spelled is not None:
                index._calls.setdefault(spelled, []).append(_Site(node, function, outer))
        stack.extend((child, function, direct, outer) for child in code_children(node))


def _own_nodes(root: cst.CSTNode, types: tuple[type, ...]) -> list[cst.CSTNode]:
    """The nodes of ``types`` under ``root`` that are not inside a definition below it."""
    found, stack = [], list(code_children(root))
    while stack:
        node = stack.pop()
        if isinstance(node, types):
            found.append(node)
        if not isinstance(node, (cst.FunctionDef, cst.ClassDef, cst.Lambda)):
            stack.extend(code_children(node))
    return found


@dataclass
class Float64:
    """What the search needs: names resolved by the rule, the index of the whole module
    (which asks the engine for the whole file when the search first reads beyond the
    function it started in), the code of a node (for the message), and what to call
    before a class's fields are read (its methods may have been left out)."""

    qualname: Qualname
    index: ModuleIndex
    code: Callable[[cst.CSTNode], str]
    reading_class: Optional[Callable[[], None]] = None
    seen: set = field(default_factory=set)  # the (node, scope) pairs on the path being followed
    #: what each (node, scope) pair was found to be: each is followed once per file, so a
    #: name assigned from many others costs what its assignments do, not their paths
    known: dict = field(default_factory=dict)
    scopes: dict = field(default_factory=dict)  # id(scope) -> {spelled target: values}

    def source(self, node: cst.BaseExpression, function: Scope, klass: Optional[cst.ClassDef],
               depth: int = 0) -> Optional[str]:
        """What makes ``node`` a float64 array (for the message), or None when that is
        not known."""
        key = (id(node), id(function))
        if key in self.known:
            return self.known[key]
        if depth > _MAX_DEPTH or key in self.seen:
            return None
        self.seen.add(key)
        try:
            found = self.known[key] = self._source(node, function, klass, depth + 1)
        finally:
            self.seen.discard(key)
        return found

    def _source(self, node, function, klass, depth) -> Optional[str]:
        node = _kept(node, self.qualname)
        if isinstance(node, cst.Call):
            return self._call(node, function, klass, depth)
        if isinstance(node, cst.BinaryOperation):
            for side in (node.left, node.right):
                found = self.source(side, function, klass, depth)
                if found:
                    return found
            if isinstance(node.operator, cst.Divide) and any(
                    self._integer(side, function, klass) for side in (node.left, node.right)):
                return f"`{_short(self.code(node))}`: true division of integers makes float64"
            return None
        if isinstance(node, cst.UnaryOperation):
            return self.source(node.expression, function, klass, depth)
        if isinstance(node, (cst.List, cst.Tuple)):
            return self._any([e.value for e in node.elements if isinstance(e, cst.Element)], function, klass, depth)
        if isinstance(node, (cst.ListComp, cst.GeneratorExp)):
            return self.source(node.elt, function, klass, depth)
        if isinstance(node, cst.Attribute) and isinstance(node.value, cst.Name) and node.value.value != "self":
            return self._instance_field(node, function, klass, depth)
        name = _spelled(node)
        if name is None:
            return None
        if isinstance(node, cst.Name) and isinstance(function, cst.FunctionDef) and _is_parameter(name, function):
            return self._parameter(node.value, function, klass, depth)
        values, where = self._values(name, function, klass)
        # a field's values are read in the class: their names may be any method's
        return self._any(values, klass if name.startswith("self.") else where, klass, depth)

    def _values(self, name: str, function, klass) -> tuple[list[cst.BaseExpression], Scope]:
        """What ``name`` is assigned, and the scope those values are read in: the
        function's own assignments, else (a global it reads) the module's top level."""
        values = self._assigned(name, function, klass)
        if values or name.startswith("self.") or function is self.index.module:
            return values, function
        return self.index.top_level(name), self.index.module

    def _assigned(self, name: Optional[str], function, klass) -> list[cst.BaseExpression]:
        """What ``name`` (or ``self.x``) is assigned in its scope: each scope's assignments
        are collected once, in one walk."""
        scope = klass if name is not None and name.startswith("self.") else function
        if name is None or scope is None:
            return []
        if scope is klass and self.reading_class is not None:
            self.reading_class()
        table = self.scopes.get(id(scope))
        if table is None:
            table = self.scopes[id(scope)] = _assignments(nodes_of(scope, _ASSIGNS))
        return table.get(name, [])

    def _any(self, values, function, klass, depth) -> Optional[str]:
        for value in values:
            found = self.source(value, function, klass, depth)
            if found:
                return found
        return None

    def _call(self, call: cst.Call, function, klass, depth) -> Optional[str]:
        name = self.qualname(call.func)
        func = call.func
        if name is not None and name.startswith("numpy."):
            return self._numpy(call, name, function, klass, depth)
        if isinstance(func, cst.Attribute) and name is None:
            method = func.attr.value
            if method == "astype":
                given = _dtype_arg(call, 0)
                return f"`.astype({self.code(given)})`" if given is not None and _is_float64(given, self.qualname) \
                    else None
            if method in _RANDOM_FLOATS and self._generator(func.value, function, klass):
                return self._unless_dtype(call, -1, f"`{_short(self.code(call))}` draws float64")
            if isinstance(func.value, cst.Name) and func.value.value in ("self", "cls"):
                return self._returns(method, function, klass, depth, own_class=klass) if klass is not None else None
            if method not in _NOT_KEPT:
                return self.source(func.value, function, klass, depth)
            return None
        if isinstance(func, cst.Name) and (name is None or "." not in name) and func.value in self.index.functions:
            return self._returns(func.value, function, klass, depth)
        return None

    def _numpy(self, call: cst.Call, name: str, function, klass, depth) -> Optional[str]:
        short = name.rsplit(".", 1)[-1]
        spelled = f"`{_short(self.code(call))}`"
        if name.startswith("numpy.random.") and short in _RANDOM_FLOATS:
            return self._unless_dtype(call, -1, f"{spelled} draws float64")
        if short in _NOT_FLOAT or short == "astype":
            return None
        dtype = _dtype_arg(call, _FLOAT_DEFAULT.get(short, _FROM_DATA.get(short, -1)))
        if dtype is not None:
            return f"{spelled} makes float64" if _is_float64(dtype, self.qualname) else None
        if short in _FLOAT_DEFAULT and name.count(".") == 1:
            return f"{spelled} makes float64 (NumPy's default dtype)"
        if short in ("array", "asarray") and call.args and _float_literals(call.args[0].value):
            return f"{spelled} of floats makes float64"
        if short == "full" and len(call.args) > 1 and isinstance(call.args[1].value, cst.Float):
            return f"{spelled} makes float64"
        args = [a.value for a in call.args if a.keyword is None and not a.star]
        return self._any(args, function, klass, depth)

    def _unless_dtype(self, call: cst.Call, position: int, reason: str) -> Optional[str]:
        dtype = _dtype_arg(call, position)
        return reason if dtype is None or _is_float64(dtype, self.qualname) else None

    def _generator(self, node: cst.BaseExpression, function, klass) -> bool:
        """A ``RandomState`` / ``default_rng`` generator, made here or assigned to a name."""
        if isinstance(node, cst.Call):
            return self.qualname(node.func) in _GENERATORS
        if self.qualname(node) == "numpy.random":
            return True
        return any(isinstance(v, cst.Call) and self.qualname(v.func) in _GENERATORS
                   for v in self._assigned(_spelled(node), function, klass))

    def _integer(self, node: cst.BaseExpression, function, klass) -> bool:
        """An integer NumPy array: a PIL image's pixels, directly or through a name."""
        node = _kept(node, self.qualname)
        if isinstance(node, cst.Call):
            return _pil_pixels(node, self.qualname, function, klass, 0, self.reading_class)
        values = self._assigned(_spelled(node), function, klass)
        return bool(values) and all(
            isinstance(v, cst.Call) and _pil_pixels(v, self.qualname, function, klass, 0, self.reading_class)
            for v in values)

    def _returns(self, name: str, function, klass, depth, own_class: Optional[cst.ClassDef] = None) -> Optional[str]:
        """What a call of the module's own function ``name`` (a method of ``own_class``) returns."""
        for definition in self.index.functions.get(name, ()):
            if own_class is not None and definition.klass is not own_class:
                continue
            if own_class is None and (definition.klass is not None or not (
                    definition.outer is function or definition.outer is self.index.module)):
                continue
            returned = [r.value for r in _own_nodes(definition.node.body, (cst.Return,)) if r.value is not None]
            found = self._any(returned, definition.node, definition.klass, depth)
            if found:
                return found
        return None

    def _instance_field(self, node: cst.Attribute, function, klass, depth) -> Optional[str]:
        """``obj.field`` where ``obj`` is an instance of the module's own class."""
        for value in self._values(node.value.value, function, klass)[0]:
            library = self.qualname(value.func) if isinstance(value, cst.Call) else None
            if node.attr.value in _FLOAT64_FIELDS.get(library or "", ()):
                return f"`{library.rsplit('.', 1)[-1]}` ({library.split('.')[0]}) keeps `{node.attr.value}` as float64"
            if isinstance(value, cst.Call) and isinstance(value.func, cst.Name):
                owner = self.index.classes.get(value.func.value)
                if owner is not None:
                    found = self._any(self._assigned("self." + node.attr.value, owner, owner), owner, owner, depth)
                    if found:
                        return found
        return None

    def _parameter(self, name: str, function: cst.FunctionDef, klass, depth) -> Optional[str]:
        """A parameter: what the module's calls of its function pass for it."""
        params = function.params
        positional = [p.name.value for p in (*params.posonly_params, *params.params)]
        method = klass is not None and bool(positional) and positional[0] in ("self", "cls")
        spelled = f"self.{function.name.value}" if method else function.name.value
        index = positional.index(name) - (1 if method else 0) if name in positional else None
        for site in self.index.calls.get(spelled, ()):
            if method and site.klass is not klass:
                continue
            given = _argument(site.call, name, index)
            if given is not None:
                found = self.source(given, site.function, site.klass, depth)
                if found:
                    return found
        return None


def _is_parameter(name: str, function: cst.FunctionDef) -> bool:
    params = function.params
    return any(p.name.value == name for p in (*params.posonly_params, *params.params, *params.kwonly_params))


def _argument(call: cst.Call, name: str, index: Optional[int]) -> Optional[cst.BaseExpression]:
    given = argument(call, name, index if index is None or index >= 0 else None)
    return given.value if given is not None else None


def _dtype_arg(call: cst.Call, position: int) -> Optional[cst.BaseExpression]:
    return _argument(call, "dtype", position)


def _is_float64(node: cst.BaseExpression, qualname: Qualname) -> bool:
    text = string_value(node)
    if text is not None:
        return text.lstrip("<>=|") in _FLOAT64_NAMES
    if isinstance(node, cst.Name) and node.value == "float":
        return True
    name = qualname(node)
    return name is not None and name.split(".")[0] == "numpy" and name.rsplit(".", 1)[-1] in _FLOAT64_NAMES


def _float_literals(node: cst.BaseExpression) -> bool:
    if isinstance(node, cst.Float):
        return True
    if isinstance(node, (cst.List, cst.Tuple)):
        return any(isinstance(e, cst.Element) and _float_literals(e.value) for e in node.elements)
    if isinstance(node, cst.UnaryOperation):
        return _float_literals(node.expression)
    return False


def _short(code: str) -> str:
    code = " ".join(code.split())
    return code if len(code) <= 60 else code[:57] + "..."
