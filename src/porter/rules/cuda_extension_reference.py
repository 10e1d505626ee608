"""A compiled CUDA extension's callers take the module's own PyTorch reference off CUDA (TP608)."""

from __future__ import annotations

import libcst as cst

from porter.rulebase.families.thirdparty.kernel_builds import (COMPILED_MODULES, guarded_import, handler_torch,
                                                           imports_of)
from porter.rulebase.families.thirdparty.kernel_references import wiring
from porter.rulebase.families.thirdparty.uses import example_code
from porter.rulebase.rule import Example, Needs, Rule, Safety

def _defined_at(body, name: str) -> int:
    """The index of the last module-level definition of ``name`` (other rules may have
    added or removed statements before it in this pass)."""
    return max((i for i, stmt in enumerate(body)
                if isinstance(stmt, (cst.FunctionDef, cst.ClassDef)) and stmt.name.value == name), default=-1)


class CudaExtensionReference(Rule):
    """A compiled extension's kernels run the module's own PyTorch reference off CUDA.

    What:
    Where a module imports a compiled CUDA extension (one the repository's `setup.py`
    builds with `CUDAExtension`, or a known one such as `selective_scan_cuda`), calls it
    only inside module-level functions or `torch.autograd.Function` classes, and keeps
    beside each of them a PyTorch function that says it is its reference
    (`ms_deform_attn_core_pytorch` beside `MSDeformAttnFunction`, `selective_scan_ref`
    beside `SelectiveScanFn`: the same words, plus `pytorch` / `torch` / `ref` /
    `naive` / `fallback`) whose parameters the kernel's callers pass by name, the import
    is wrapped in `try` / `except ImportError:` (re-raised where torch sees CUDA, the
    name None elsewhere; an import already in a `try` whose handler only says how to
    build the extension and raises keeps that handler where torch sees CUDA: Mask2Former's
    copy), and after both definitions
    `Kernel = porter_runtime.reference_path(Kernel, reference, ext)` is added.

    Why:
    The extension is built by `python setup.py install` with nvcc, which a Mac lacks
    (its CPU kernels are often `AT_ERROR("Not implemented on cpu")` stubs): the import
    of the model fails with `ModuleNotFoundError` though the PyTorch path that the
    repository's own tests compare the kernel against is twenty lines away.

    Fix safety:
    Safe. On CUDA the import fails where it did if the extension is missing, and
    `reference_path` returns the kernel untouched where it imported: nothing changes.
    Where it is missing (no CUDA), calls of the function, or the Function's `apply`,
    run the reference with the arguments its parameters name; autograd runs through
    the reference's PyTorch operations (the kernel's own backward is never needed).

    Known limits:
    The reference is found by its name and its parameter names, not by what it
    computes: the repository's name is taken at its word. A use of the extension
    outside such a pair (a module-level call, a method of another class) leaves the
    module as it is, for PT999 to name.
    """

    code = "TP608"
    name = "cuda-extension-reference"
    safety = Safety.SAFE
    needs = Needs(
        whole_file=True,  # every use of the extension and every function of the module decide
        targets=frozenset(COMPILED_MODULES),
        byte_patterns=imports_of(COMPILED_MODULES),
        project=lambda model, rel: rel in model.extension_importers,
    )

    valid = [
        # no reference beside the kernel
        "import torch\nimport rotary_emb\n\ndef apply_rotary(x, cos, sin):\n    return rotary_emb.apply(x, cos, sin)\n",
        # the reference needs an argument the kernel's callers don't give
        "import torch\nimport rotary_emb\n\ndef apply_rotary(x, cos):\n    return rotary_emb.apply(x, cos)\n\n"
        "def apply_rotary_torch(x, cos, sin):\n    return x * cos + x * sin\n",
        # a use at module level
        "import torch\nimport rotary_emb\nrotary_emb.init()\n\ndef apply_rotary(x, cos):\n"
        "    return rotary_emb.apply(x, cos)\n\ndef apply_rotary_ref(x, cos):\n    return x * cos\n",
    ]
    invalid = [
        Example(  # Mask2Former's copy: the import in a try whose handler says how to compile it, and raises
            example_code("""
            import torch
            from torch.autograd import Function

            try:
                import MultiScaleDeformableAttention as MSDA
            except ModuleNotFoundError as e:
                info_string = "Please compile MultiScaleDeformableAttention CUDA op: sh make.sh"
                raise ModuleNotFoundError(info_string)


            class MSDeformAttnFunction(Function):
                @staticmethod
                def forward(ctx, value, value_spatial_shapes, sampling_locations, attention_weights):
                    return MSDA.ms_deform_attn_forward(value, value_spatial_shapes, sampling_locations, attention_weights)


            def ms_deform_attn_core_pytorch(value, value_spatial_shapes, sampling_locations, attention_weights):
                return value * attention_weights.sum()
            """),
            example_code("""
            import porter_runtime
            import torch
            from torch.autograd import Function

            try:
                import MultiScaleDeformableAttention as MSDA
            except ModuleNotFoundError as e:
                if torch.cuda.is_available():
                    info_string = "Please compile MultiScaleDeformableAttention CUDA op: sh make.sh"
                    raise ModuleNotFoundError(info_string)
                MSDA = None  # porter: off CUDA the module's PyTorch reference runs


            class MSDeformAttnFunction(Function):
                @staticmethod
                def forward(ctx, value, value_spatial_shapes, sampling_locations, attention_weights):
                    return MSDA.ms_deform_attn_forward(value, value_spatial_shapes, sampling_locations, attention_weights)


            def ms_deform_attn_core_pytorch(value, value_spatial_shapes, sampling_locations, attention_weights):
                return value * attention_weights.sum()


            MSDeformAttnFunction = porter_runtime.reference_path(MSDeformAttnFunction, ms_deform_attn_core_pytorch, MSDA)
            """),
            path="mask2former/modeling/pixel_decoder/ops/functions/ms_deform_attn_func.py",
            project=(("mask2former/modeling/pixel_decoder/ops/setup.py", example_code("""
                from setuptools import setup
                from torch.utils.cpp_extension import CUDA_HOME, CppExtension, CUDAExtension

                extension = CppExtension
                if torch.cuda.is_available() and CUDA_HOME is not None:
                    extension = CUDAExtension
                setup(name="MultiScaleDeformableAttention", ext_modules=[extension("MultiScaleDeformableAttention", sources)])
                """)),),
        ),
        Example(  # Deformable-DETR's models/ops/functions/ms_deform_attn_func.py, shortened
            example_code("""
            import torch
            import torch.nn.functional as F
            from torch.autograd import Function
            from torch.autograd.function import once_differentiable

            import MultiScaleDeformableAttention as MSDA


            class MSDeformAttnFunction(Function):
                @staticmethod
                def forward(ctx, value, value_spatial_shapes, value_level_start_index, sampling_locations,
                            attention_weights, im2col_step):
                    ctx.im2col_step = im2col_step
                    output = MSDA.ms_deform_attn_forward(
                        value, value_spatial_shapes, value_level_start_index, sampling_locations, attention_weights,
                        ctx.im2col_step)
                    ctx.save_for_backward(value, value_spatial_shapes, value_level_start_index, sampling_locations,
                                          attention_weights)
                    return output

                @staticmethod
                @once_differentiable
                def backward(ctx, grad_output):
                    value, value_spatial_shapes, value_level_start_index, sampling_locations, attention_weights = \\
                        ctx.saved_tensors
                    grad_value, grad_sampling_loc, grad_attn_weight = MSDA.ms_deform_attn_backward(
                        value, value_spatial_shapes, value_level_start_index, sampling_locations, attention_weights,
                        grad_output, ctx.im2col_step)
                    return grad_value, None, None, grad_sampling_loc, grad_attn_weight, None


            def ms_deform_attn_core_pytorch(value, value_spatial_shapes, sampling_locations, attention_weights):
                # for debug and test only,
                # need to use cuda version instead
                N_, S_, M_, D_ = value.shape
                _, Lq_, M_, L_, P_, _ = sampling_locations.shape
                value_list = value.split([H_ * W_ for H_, W_ in value_spatial_shapes], dim=1)
                sampling_grids = 2 * sampling_locations - 1
                sampling_value_list = []
                for lid_, (H_, W_) in enumerate(value_spatial_shapes):
                    value_l_ = value_list[lid_].flatten(2).transpose(1, 2).reshape(N_ * M_, D_, H_, W_)
                    sampling_grid_l_ = sampling_grids[:, :, :, lid_].transpose(1, 2).flatten(0, 1)
                    sampling_value_l_ = F.grid_sample(value_l_, sampling_grid_l_, mode='bilinear',
                                                      padding_mode='zeros', align_corners=False)
                    sampling_value_list.append(sampling_value_l_)
                attention_weights = attention_weights.transpose(1, 2).reshape(N_ * M_, 1, Lq_, L_ * P_)
                output = (torch.stack(sampling_value_list, dim=-2).flatten(-2) * attention_weights).sum(-1)
                return output.view(N_, M_ * D_, Lq_).transpose(1, 2).contiguous()
            """),
            example_code("""
            import porter_runtime
            import torch
            import torch.nn.functional as F
            from torch.autograd import Function
            from torch.autograd.function import once_differentiable

            try:
                import MultiScaleDeformableAttention as MSDA
            except ImportError:  # CUDA-only extension: off CUDA the module's PyTorch reference runs
                if torch.cuda.is_available():
                    raise
                MSDA = None


            class MSDeformAttnFunction(Function):
                @staticmethod
                def forward(ctx, value, value_spatial_shapes, value_level_start_index, sampling_locations,
                            attention_weights, im2col_step):
                    ctx.im2col_step = im2col_step
                    output = MSDA.ms_deform_attn_forward(
                        value, value_spatial_shapes, value_level_start_index, sampling_locations, attention_weights,
                        ctx.im2col_step)
                    ctx.save_for_backward(value, value_spatial_shapes, value_level_start_index, sampling_locations,
                                          attention_weights)
                    return output

                @staticmethod
                @once_differentiable
                def backward(ctx, grad_output):
                    value, value_spatial_shapes, value_level_start_index, sampling_locations, attention_weights = \\
                        ctx.saved_tensors
                    grad_value, grad_sampling_loc, grad_attn_weight = MSDA.ms_deform_attn_backward(
                        value, value_spatial_shapes, value_level_start_index, sampling_locations, attention_weights,
                        grad_output, ctx.im2col_step)
                    return grad_value, None, None, grad_sampling_loc, grad_attn_weight, None


            def ms_deform_attn_core_pytorch(value, value_spatial_shapes, sampling_locations, attention_weights):
                # for debug and test only,
                # need to use cuda version instead
                N_, S_, M_, D_ = value.shape
                _, Lq_, M_, L_, P_, _ = sampling_locations.shape
                value_list = value.split([H_ * W_ for H_, W_ in value_spatial_shapes], dim=1)
                sampling_grids = 2 * sampling_locations - 1
                sampling_value_list = []
                for lid_, (H_, W_) in enumerate(value_spatial_shapes):
                    value_l_ = value_list[lid_].flatten(2).transpose(1, 2).reshape(N_ * M_, D_, H_, W_)
                    sampling_grid_l_ = sampling_grids[:, :, :, lid_].transpose(1, 2).flatten(0, 1)
                    sampling_value_l_ = F.grid_sample(value_l_, sampling_grid_l_, mode='bilinear',
                                                      padding_mode='zeros', align_corners=False)
                    sampling_value_list.append(sampling_value_l_)
                attention_weights = attention_weights.transpose(1, 2).reshape(N_ * M_, 1, Lq_, L_ * P_)
                output = (torch.stack(sampling_value_list, dim=-2).flatten(-2) * attention_weights).sum(-1)
                return output.view(N_, M_ * D_, Lq_).transpose(1, 2).contiguous()


            MSDeformAttnFunction = porter_runtime.reference_path(MSDeformAttnFunction, ms_deform_attn_core_pytorch, MSDA)
            """),
            path="models/ops/functions/ms_deform_attn_func.py",
            project=(("models/ops/setup.py", example_code("""
                from setuptools import setup
                from torch.utils.cpp_extension import CUDA_HOME, CppExtension, CUDAExtension

                extension = CppExtension
                if torch.cuda.is_available() and CUDA_HOME is not None:
                    extension = CUDAExtension
                ext_modules = [extension("MultiScaleDeformableAttention", sources, include_dirs=include_dirs)]
                setup(name="MultiScaleDeformableAttention", ext_modules=ext_modules)
                """)),),
        ),
    ]

    def leave_SimpleStatementLine(self, original: cst.SimpleStatementLine,
                                  updated: cst.SimpleStatementLine) -> cst.BaseStatement:
        found = self._wiring()
        if found is None or original is not found[0]:
            return updated
        new = guarded_import(self, original, updated, "CUDA-only extension: off CUDA the module's PyTorch "
                             "reference runs", found[1])
        kernels = ", ".join(f"`{k.name}`" for k, _ in found[2])
        return self.rewrite(original, new, f"`{found[1]}` is imported where it exists (CUDA); elsewhere {kernels} "
                            "run the module's PyTorch reference")

    def leave_Try(self, original: cst.Try, updated: cst.Try) -> cst.BaseStatement:
        found = self._wiring()
        if found is None or original is not found[0]:
            return updated
        # `except ImportError: raise ImportError("compile the op ...")`: the handler keeps its
        # message where torch sees CUDA and binds the name to None elsewhere
        alias, line = handler_torch(self.ctx.module, original)
        first = [cst.parse_statement(line)] if line else []
        fallback = cst.parse_statement(f"{found[1]} = None  # porter: off CUDA the module's PyTorch reference runs\n")
        handlers = []
        for handler in updated.handlers:
            stops = cst.If(test=cst.parse_expression(f"{alias}.cuda.is_available()"),
                           body=cst.IndentedBlock(body=list(handler.body.body)))
            handlers.append(handler.with_changes(body=handler.body.with_changes(body=[*first, stops, fallback])))
        kernels = ", ".join(f"`{k.name}`" for k, _ in found[2])
        return self.rewrite(original, updated.with_changes(handlers=handlers),
                            f"`{found[1]}` is imported where it exists (CUDA), and its handler stops there as before; "
                            f"elsewhere {kernels} run the module's PyTorch reference")

    def leave_Module(self, original: cst.Module, updated: cst.Module) -> cst.Module:
        found = self._wiring()
        if found is None:
            return updated
        _, name, pairs = found
        after: dict[int, list[cst.SimpleStatementLine]] = {}
        for kernel, reference in pairs:
            if self.ctx.suppressed(kernel.node, self.code) or self.ctx.keeps(kernel.node):
                continue
            at = max(_defined_at(updated.body, kernel.name), _defined_at(updated.body, reference.name.value))
            if at < 0:
                continue
            wired = cst.parse_statement(f"{kernel.name} = porter_runtime.reference_path("
                                        f"{kernel.name}, {reference.name.value}, {name})")
            wired = wired.with_changes(leading_lines=[cst.EmptyLine(), cst.EmptyLine()])
            self.runtime("reference_path")  # schedules the runtime import
            self.ctx.record(self, kernel.node, "rewrite", f"`{kernel.name}` calls the compiled extension "
                            f"`{name}`; where it is missing (no CUDA) its calls run the module's PyTorch "
                            f"`{reference.name.value}`", after=wired)
            after.setdefault(at, []).append(wired)
        if not after:
            return updated
        body: list[cst.BaseStatement] = []
        for index, stmt in enumerate(updated.body):
            body.append(stmt)
            body.extend(after.get(index, ()))
        return updated.with_changes(body=body)

    def _wiring(self):
        if not hasattr(self, "_wired"):
            self._wired = wiring(self)
        return self._wired
