"""A ``setup.py`` that stops without CUDA builds no extension there instead (PT203)."""

from __future__ import annotations

from textwrap import dedent

import libcst as cst

from porter.rulebase.families.thirdparty.kernel_builds import extension_build_stop
from porter.rulebase.rule import Example, Needs, Rule, Safety


class ExtensionBuildStop(Rule):
    """`else: raise ...` after the CUDA test of a setup.py's extension builder becomes `return []`.

    What:
    In a `setup.py`, in the function whose call is passed as `ext_modules=` (a
    `get_extensions()`), an `if torch.cuda.is_available() and CUDA_HOME is not None:`
    whose `else` only reports and stops (`raise NotImplementedError("Cuda is not
    available")`) gets `return []` in that `else`: no extension is built there.

    Why:
    Deformable-DETR's `models/ops/setup.py` (copied by DINO, Mask2Former and the
    other deformable-attention repositories) raises without CUDA, so the README's
    `sh make.sh` stops a Mac's install before the Python packages it also ships are
    installed, though the code that imports the extension has a PyTorch path once
    ported (TP608).

    Fix safety:
    Safe. Where torch sees CUDA (and the CUDA toolkit) the `if` branch runs as before
    and the `else` never does. Elsewhere the build could only stop: now it installs the
    Python packages without the compiled extension.

    Known limits:
    Only an `else` that stops (or holds one `if` whose every branch stops), at the top of
    that function, is rewritten; PT202 reports a CUDA test elsewhere in a build script.
    """

    code = "PT203"
    name = "extension-build-stop"
    safety = Safety.SAFE
    needs = Needs(whole_file=True, targets=frozenset({"torch.cuda.is_available"}))

    valid = [
        # not the function ext_modules= calls
        "import torch\n\ndef check():\n    if torch.cuda.is_available():\n        pass\n    else:\n"
        "        raise RuntimeError('no CUDA')\n",
    ]
    invalid = [
        Example(  # Deformable-DETR's models/ops/setup.py, shortened
            dedent("""\
                import torch
                from setuptools import find_packages, setup
                from torch.utils.cpp_extension import CUDA_HOME, CppExtension, CUDAExtension


                def get_extensions():
                    sources = main_file + source_cpu
                    extension = CppExtension
                    define_macros = []

                    if torch.cuda.is_available() and CUDA_HOME is not None:
                        extension = CUDAExtension
                        sources += source_cuda
                        define_macros += [("WITH_CUDA", None)]
                    else:
                        raise NotImplementedError('Cuda is not availabel')

                    ext_modules = [extension("MultiScaleDeformableAttention", sources, define_macros=define_macros)]
                    return ext_modules


                setup(name="MultiScaleDeformableAttention", packages=find_packages(exclude=("configs", "tests")),
                      ext_modules=get_extensions())
                """),
            dedent("""\
                import torch
                from setuptools import find_packages, setup
                from torch.utils.cpp_extension import CUDA_HOME, CppExtension, CUDAExtension


                def get_extensions():
                    sources = main_file + source_cpu
                    extension = CppExtension
                    define_macros = []

                    if torch.cuda.is_available() and CUDA_HOME is not None:
                        extension = CUDAExtension
                        sources += source_cuda
                        define_macros += [("WITH_CUDA", None)]
                    else:
                        return []  # porter: no CUDA, no extension: the code's PyTorch path runs without it

                    ext_modules = [extension("MultiScaleDeformableAttention", sources, define_macros=define_macros)]
                    return ext_modules


                setup(name="MultiScaleDeformableAttention", packages=find_packages(exclude=("configs", "tests")),
                      ext_modules=get_extensions())
                """),
            path="models/ops/setup.py",
        ),
        Example(  # Mask2Former's copy: FORCE_CUDA in the test, and an else whose every branch raises
            dedent("""\
                import os

                import torch
                from setuptools import setup
                from torch.utils.cpp_extension import CUDA_HOME, CppExtension, CUDAExtension


                def get_extensions():
                    extension = CppExtension
                    if (os.environ.get('FORCE_CUDA') or torch.cuda.is_available()) and CUDA_HOME is not None:
                        extension = CUDAExtension
                        sources += source_cuda
                    else:
                        if CUDA_HOME is None:
                            raise NotImplementedError('CUDA_HOME is None. Please set environment variable CUDA_HOME.')
                        else:
                            raise NotImplementedError('No CUDA runtime is found. Please set FORCE_CUDA=1.')
                    return [extension("MultiScaleDeformableAttention", sources)]


                setup(name="MultiScaleDeformableAttention", ext_modules=get_extensions())
                """),
            dedent("""\
                import os

                import torch
                from setuptools import setup
                from torch.utils.cpp_extension import CUDA_HOME, CppExtension, CUDAExtension


                def get_extensions():
                    extension = CppExtension
                    if (os.environ.get('FORCE_CUDA') or torch.cuda.is_available()) and CUDA_HOME is not None:
                        extension = CUDAExtension
                        sources += source_cuda
                    else:
                        return []  # porter: no CUDA, no extension: the code's PyTorch path runs without it
                    return [extension("MultiScaleDeformableAttention", sources)]


                setup(name="MultiScaleDeformableAttention", ext_modules=get_extensions())
                """),
            path="mask2former/modeling/pixel_decoder/ops/setup.py",
        ),
    ]

    def leave_If(self, original: cst.If, updated: cst.If) -> cst.BaseStatement:
        if not extension_build_stop(self, original) or not isinstance(updated.orelse, cst.Else):
            return updated
        stop = cst.parse_statement("return []  # porter: no CUDA, no extension: the code's PyTorch path runs without it\n")
        body = updated.orelse.body.with_changes(body=[stop])
        new = updated.with_changes(orelse=updated.orelse.with_changes(body=body))
        return self.rewrite(original, new, "without CUDA the build script now builds no extension instead of "
                            "stopping; the `if` branch runs as before where CUDA is")
