"""CUDA-only packages in setup.py's literal ``install_requires`` (DEP103)."""

from __future__ import annotations

import libcst as cst

from porter.project.requirements import (
    PLATFORM_MARKER,
    is_cuda_only,
    parse,
    with_platform_marker,
)
from porter.rulebase.families.manifest_files import (
    marker_message,
)
from porter.rulebase.rule import Example, Needs, Rule, Safety


class SetupCudaOnly(Rule):
    """CUDA-only packages in a literal `install_requires` get `; sys_platform != "darwin"`.

    What:
    In `setuptools.setup(install_requires=[...])` (or `distutils.core.setup`), each
    plain string literal naming a CUDA-only package (the list of DEP101) gets the
    marker `sys_platform != "darwin"` inside the string, quoted with the other kind
    of quote.

    Why:
    `pip install .` fails on a Mac when a CUDA-only package has no macOS build.

    Fix safety:
    Safe: the marker is true on Linux and Windows, where CUDA exists, so CUDA
    machines install exactly what they did. CPU-only Linux still installs the package:
    move it to `extras_require={"cuda": [...]}` by hand if that matters.

    Known limits:
    Only a list or tuple literal passed as `install_requires=` is read; requirements
    built in code (read from requirements.txt, concatenated, in a variable) are not,
    and `extras_require` is left alone. Strings with prefixes, escapes or triple
    quotes are skipped.
    """

    code = "DEP103"
    name = "setup-cuda-only"
    safety = Safety.SAFE
    needs = Needs(targets=frozenset({"setuptools.setup", "distutils.core.setup"}))

    valid = [
        Example('from setuptools import setup\nsetup(name="x", install_requires=["torch>=2.5"])\n', path="setup.py"),
        Example('def f(setup):\n    setup(install_requires=["flash-attn"])\n', path="setup.py"),
        Example('import mylib as setuptools\nsetuptools.setup(install_requires=["flash-attn"])\n', path="setup.py"),
        Example('from setuptools import setup\nsetup(extras_require={"cuda": ["flash-attn"]})\n', path="setup.py"),
    ]
    invalid = [
        Example('from setuptools import setup\n\nsetup(\n    name="x",\n    install_requires=[\n'
                '        "torch>=2.5",\n        "flash-attn>=2.5",  # kernels\n    ],\n)\n',
                'from setuptools import setup\n\nsetup(\n    name="x",\n    install_requires=[\n'
                '        "torch>=2.5",\n        "flash-attn>=2.5; sys_platform != \'darwin\'",  # kernels\n'
                '    ],\n)\n', path="setup.py"),
        Example("import setuptools as st\nst.setup(install_requires=('xformers', 'numpy'))\n",
                "import setuptools as st\nst.setup(install_requires=('xformers; sys_platform != \"darwin\"', "
                "'numpy'))\n", path="setup.py"),
        Example("from distutils.core import setup\nsetup(install_requires=['triton; python_version >= \"3.9\"'])\n",
                "from distutils.core import setup\nsetup(install_requires=['triton; python_version >= \"3.9\" "
                "and sys_platform != \"darwin\"'])\n", path="setup.py"),
    ]

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self._marked: dict[cst.SimpleString, str] = {}

    def visit_Call(self, node: cst.Call) -> None:
        if not self.matches(node.func):
            return
        for arg in node.args:
            if arg.keyword is not None and arg.keyword.value == "install_requires" and \
                    isinstance(arg.value, (cst.List, cst.Tuple)):
                for element in arg.value.elements:
                    self._consider(element.value)

    def _consider(self, node: cst.BaseExpression) -> None:
        if not isinstance(node, cst.SimpleString) or node.prefix or len(node.quote) != 1 or "\\" in node.value:
            return
        req = parse(node.raw_value)
        if req is None or not is_cuda_only(req.name):
            return
        inner = "'" if node.quote == '"' else '"'
        new = with_platform_marker(req, inner)
        if new is not None:
            self._marked[node] = f"{node.quote}{new}{node.raw_value[req.end:]}{node.quote}"

    def leave_SimpleString(self, original: cst.SimpleString, updated: cst.SimpleString) -> cst.BaseExpression:
        new = self._marked.get(original)
        if new is None:
            return updated
        req = parse(original.raw_value)
        marker = PLATFORM_MARKER.format(q="'" if original.quote == '"' else '"')
        return self.rewrite(original, updated.with_changes(value=new),
                            marker_message(req.name, marker, "CPU-only Linux still installs it: move it to "
                                            "extras_require={\"cuda\": [...]} if that matters"))
