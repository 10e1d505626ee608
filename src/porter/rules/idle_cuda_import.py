"""An import of a CUDA-only package nothing in its module uses is guarded (TP609)."""

from __future__ import annotations

import libcst as cst

from porter.rulebase.cuda_packages import IMPORT_ROOTS
from porter.rulebase.families.thirdparty.idle_imports import guardable_unused
from porter.rulebase.families.thirdparty.kernel_builds import guarded_import, imports_of
from porter.rulebase.rule import Example, Needs, Rule, Safety

class IdleCudaImport(Rule):
    """An unused import of flash_attn, xformers, apex and the like is imported only where CUDA is.

    What:
    A module-level line that imports a CUDA-only package (flash_attn, xformers, apex,
    and the others TP603 names) and whose names nothing in the module uses, no other
    module of the repository reads from it and no string (`__all__`) names, placed
    after the module's `import torch`, goes into `try:` / `except ImportError:` that
    re-raises where torch sees CUDA.

    Why:
    Such a line is often left from an older version of the code (LongLoRA's
    `gptneox_attn_replace.py` imports flash_attn's padding helpers it no longer calls),
    and every script that imports the module stops there without CUDA:
    `ModuleNotFoundError: No module named 'flash_attn'` (blind round 15).

    Fix safety:
    Safe. Where torch sees CUDA the import runs as before and a missing package fails
    it where it did. Elsewhere the module's code never uses what it imports.

    Known limits:
    An import kept for its side effects only (`import xformers` registering operators)
    is guarded too: off CUDA those registrations could not happen anyway. A module
    without `import torch` before the line is left to TP603, which reports it.
    """

    code = "TP609"
    name = "idle-cuda-import"
    safety = Safety.SAFE
    # Only module-level lines change; the use count asks for the whole file when one
    # looks unused in the parts the engine parsed (rulebase.families.thirdparty.idle_imports).
    needs = Needs(targets=frozenset(IMPORT_ROOTS), byte_patterns=imports_of(IMPORT_ROOTS))

    valid = [
        "import torch\nfrom flash_attn.bert_padding import unpad_input\nx = unpad_input\n",  # used
        "from flash_attn.bert_padding import unpad_input\nimport torch\n",  # torch comes after
        "import torch\nfrom flash_attn.bert_padding import unpad_input\n__all__ = ['unpad_input']\n",
        "import torch\nfrom flash_attn import __version__ as flash_attn_version\n",  # TP104's
        # Liger-Kernel's CuTe DSL module: the package's other import is used, so guarding
        # this one changes nothing off CUDA (TP603 reports the first)
        "import torch\nimport cutlass\nimport cutlass.cute as cute\n\n\ndef ce(x):\n    return cute.compile(x)\n",
    ]
    invalid = [
        Example(  # LongLoRA's gptneox_attn_replace.py
            "import torch\nimport transformers\nfrom flash_attn.bert_padding import unpad_input, pad_input\n\n\n"
            "def forward_attention(self, hidden_states):\n    return hidden_states\n",
            "import torch\nimport transformers\ntry:\n    from flash_attn.bert_padding import unpad_input, pad_input\n"
            "except ImportError:  # CUDA-only and unused in this module: off CUDA it is not needed\n"
            "    if torch.cuda.is_available():\n        raise\n\n\n"
            "def forward_attention(self, hidden_states):\n    return hidden_states\n",
        ),
        Example(  # LongLoRA's gptneox_attn_replace.py: the kernel import is used (TP101's), the helpers' is not
            "import torch\nfrom flash_attn import flash_attn_varlen_qkvpacked_func\n"
            "from flash_attn.bert_padding import unpad_input, pad_input\n\n\n"
            "def attend(qkv, cu, n):\n    return flash_attn_varlen_qkvpacked_func(qkv, cu, n, 0.0, causal=True)\n",
            "import torch\nfrom flash_attn import flash_attn_varlen_qkvpacked_func\ntry:\n"
            "    from flash_attn.bert_padding import unpad_input, pad_input\n"
            "except ImportError:  # CUDA-only and unused in this module: off CUDA it is not needed\n"
            "    if torch.cuda.is_available():\n        raise\n\n\n"
            "def attend(qkv, cu, n):\n    return flash_attn_varlen_qkvpacked_func(qkv, cu, n, 0.0, causal=True)\n",
        ),
    ]

    def leave_SimpleStatementLine(self, original: cst.SimpleStatementLine,
                                  updated: cst.SimpleStatementLine) -> cst.BaseStatement:
        module = guardable_unused(self, original)
        if module is None:
            return updated
        new = guarded_import(self, original, updated, "CUDA-only and unused in this module: off CUDA it is not needed")
        return self.rewrite(original, new, f"`{module}` is imported but nothing here uses it: it is imported where "
                            "torch sees CUDA, as before, and skipped elsewhere, where it does not install")
