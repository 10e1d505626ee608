"""Whether a NumPy array's dtype is known, from the code around it, not to be float64.

``torch.from_numpy(a).to(device)`` fails on MPS only when ``a`` is float64 (PT605). The
array is often made a few lines up with its dtype in plain sight: ``.astype("float32")``,
``np.zeros(shape, dtype=np.uint8)`` (a replay buffer's field, set in ``__init__``),
scipy's ``linear_sum_assignment`` (integer indices), ``np.array(img)`` of a PIL image
(uint8, or int32 / float32 for the "I" and "F" modes: Pillow has no float64 mode). Indexing, ``transpose`` and
``reshape`` keep a dtype. Anything else (a parameter, a file's contents, arithmetic) is
unknown and stays a finding.
"""

from __future__ import annotations

from typing import Callable, Optional

import libcst as cst

from porter.rulebase.rule import keyword, string_value
from porter.rulebase.walk import nodes_of

#: dtype spellings that are not float64 (``np.<name>``, ``"<name>"``, or the builtin).
_NOT_FLOAT64 = frozenset({
    "float32", "float16", "half", "single", "uint8", "uint16", "uint32", "uint64", "int8", "int16", "int32",
    "int64", "bool", "bool_", "intc", "intp", "ubyte", "byte", "short", "int_", "longlong", "complex64", "csingle",
    "f4", "f2", "u1", "i1", "i2", "i4", "i8", "int", "long",
})
#: NumPy functions that take a ``dtype=`` and make an array of it.
_MAKERS = frozenset(f"numpy.{n}" for n in (
    "zeros", "ones", "empty", "full", "array", "asarray", "arange", "frombuffer", "fromfile", "zeros_like",
    "ones_like", "empty_like", "full_like", "ascontiguousarray"))
#: A NumPy Generator's draws that take a ``dtype=`` (``rng.standard_normal(n, dtype=np.float32)``).
_GENERATOR_DRAWS = frozenset({"random", "standard_normal", "standard_exponential", "standard_gamma", "integers"})
#: Functions whose results are integer arrays.
_INTEGER_RESULTS = frozenset({"scipy.optimize.linear_sum_assignment", "numpy.argsort", "numpy.argmax",
                              "numpy.argmin", "numpy.nonzero", "numpy.where"})
#: PIL calls that make an image, and Image methods that return one.
_PIL_MAKERS = frozenset(f"PIL.Image.{n}" for n in ("new", "open", "fromarray", "frombytes", "merge"))
_PIL_METHODS = frozenset({"convert", "resize", "crop", "rotate", "transpose", "copy", "filter", "quantize"})
#: Methods that keep the array's dtype.
_KEEPS = frozenset({"transpose", "reshape", "copy", "squeeze", "ravel", "flatten", "swapaxes", "repeat"})

Qualname = Callable[[cst.BaseExpression], Optional[str]]


def _is_dtype(node: cst.BaseExpression, qualname: Qualname) -> bool:
    """A dtype that is not float64: ``"float32"``, ``np.uint8``, ``int``, ``bool``."""
    text = string_value(node)
    if text is not None:
        return text.lstrip("<>=|") in _NOT_FLOAT64
    name = qualname(node) or (node.value if isinstance(node, cst.Name) and node.value in ("int", "bool") else None)
    return name is not None and name.rsplit(".", 1)[-1] in _NOT_FLOAT64 and name.split(".")[0] in ("numpy", name)


_ASSIGNS = (cst.Assign, cst.AnnAssign, cst.AugAssign)


def _assignments(nodes) -> dict[str, list[cst.BaseExpression]]:
    """Every value assigned to a name or ``self.attr`` by these statements, by target (a
    tuple target's whole value; ``a /= b`` keeps ``a``: unknown)."""
    values: dict[str, list[cst.BaseExpression]] = {}

    def bind(target: cst.BaseExpression, value: cst.BaseExpression) -> None:
        if isinstance(target, (cst.Tuple, cst.List)):
            for element in target.elements:
                bind(element.value, value)
            return
        spelled = _spelled(target)
        if spelled is not None:
            values.setdefault(spelled, []).append(value)

    for node in nodes:
        if isinstance(node, cst.Assign):
            for target in node.targets:
                bind(target.target, node.value)
        elif isinstance(node, cst.AnnAssign):
            if node.value is not None:
                bind(node.target, node.value)
        else:
            bind(node.target, node.target)
    return values


def _spelled(node: cst.BaseExpression) -> Optional[str]:
    if isinstance(node, cst.Name):
        return node.value
    if isinstance(node, cst.Attribute) and isinstance(node.value, cst.Name) and node.value.value == "self":
        return "self." + node.attr.value
    return None


def known_not_float64(node: cst.BaseExpression, qualname: Qualname, function: cst.CSTNode,
                      klass: Optional[cst.CSTNode], depth: int = 0,
                      reading_class: Optional[Callable[[], None]] = None) -> bool:
    """Whether the array ``node`` is known not to be float64. A name's assignments are
    looked up in ``function`` (the enclosing function, or the module), ``self.attr``'s
    in ``klass`` (the enclosing class); every one must be known. ``reading_class`` is
    called before ``klass`` is read (the engine may have left some of its methods out)."""
    node = _kept(node, qualname)
    if isinstance(node, cst.Call):
        return _made_not_float64(node, qualname) or _pil_pixels(node, qualname, function, klass, depth,
                                                                reading_class)
    name = _spelled(node)
    assigned = _assigned(name, function, klass, depth, reading_class)
    # `img = img.transpose(2, 0, 1)` keeps what the name's other assignments make
    values = [v for v in assigned if _spelled(_kept(v, qualname)) != name or isinstance(v, cst.Name)]
    return bool(values) and all(
        v is not node and known_not_float64(v, qualname, function, klass, depth + 1, reading_class) for v in values)


def _kept(node: cst.BaseExpression, qualname: Qualname) -> cst.BaseExpression:
    """The array under indexing and the methods that keep its dtype."""
    while True:
        if isinstance(node, cst.Subscript):
            node = node.value
        elif (isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute)
              and node.func.attr.value in _KEEPS and qualname(node.func) is None):
            node = node.func.value
        else:
            return node


def _pil_pixels(call: cst.Call, qualname: Qualname, function: cst.CSTNode, klass: Optional[cst.CSTNode],
                depth: int, reading_class: Optional[Callable[[], None]] = None) -> bool:
    """``np.array(img)`` / ``np.asarray(img)`` (no dtype) of a PIL image."""
    if qualname(call.func) not in ("numpy.array", "numpy.asarray") or keyword(call, "dtype") is not None:
        return False
    return bool(call.args) and call.args[0].keyword is None and _is_pil_image(
        call.args[0].value, qualname, function, klass, depth, reading_class)


def _is_pil_image(node: cst.BaseExpression, qualname: Qualname, function: cst.CSTNode,
                  klass: Optional[cst.CSTNode], depth: int,
                  reading_class: Optional[Callable[[], None]] = None) -> bool:
    """An image made by ``PIL.Image.new/open/...`` or an Image method of one, directly or
    through every assignment to a name."""
    if isinstance(node, cst.Call):
        if qualname(node.func) in _PIL_MAKERS:
            return True
        func = node.func
        return (isinstance(func, cst.Attribute) and func.attr.value in _PIL_METHODS and qualname(func) is None
                and _is_pil_image(func.value, qualname, function, klass, depth, reading_class))
    assigned = _assigned(_spelled(node), function, klass, depth, reading_class)
    return bool(assigned) and all(
        v is not node and _is_pil_image(v, qualname, function, klass, depth + 1, reading_class) for v in assigned)


def _assigned(name: Optional[str], function: cst.CSTNode, klass: Optional[cst.CSTNode],
              depth: int, reading_class: Optional[Callable[[], None]] = None) -> list[cst.BaseExpression]:
    """What ``name`` is assigned in its scope (``function``, or ``klass`` for ``self.x``);
    nothing for a name that is not spelled plainly, or past the depth followed."""
    if name is None or depth > 2:
        return []
    scope = klass if name.startswith("self.") else function
    if scope is None:
        return []
    if name.startswith("self.") and reading_class is not None:
        reading_class()
    return list(_assignments(nodes_of(scope, _ASSIGNS)).get(name, ()))


def _made_not_float64(call: cst.Call, qualname: Qualname) -> bool:
    name = qualname(call.func)
    if name in _INTEGER_RESULTS:
        return True
    dtype = keyword(call, "dtype")
    if name in _MAKERS and dtype is not None:
        return _is_dtype(dtype.value, qualname)
    if (isinstance(call.func, cst.Attribute) and call.func.attr.value in _GENERATOR_DRAWS and name is None
            and dtype is not None):
        return _is_dtype(dtype.value, qualname)
    if isinstance(call.func, cst.Attribute) and call.func.attr.value == "astype" and name is None:
        given = dtype.value if dtype is not None else call.args[0].value if call.args else None
        return given is not None and _is_dtype(given, qualname)
    return False
