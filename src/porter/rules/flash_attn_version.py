"""``from flash_attn import __version__`` becomes the runtime's answer (TP104)."""

from __future__ import annotations

import libcst as cst

from porter.rulebase.families.thirdparty.flash_attn_calls import version_import
from porter.rulebase.families.thirdparty.uses import GuardTracker
from porter.rulebase.rule import Example, Needs, Rule, Safety
from porter.rulebase.needs import literal_patterns


class FlashAttnVersion(GuardTracker, Rule):
    """`from flash_attn import __version__` becomes `porter_runtime.flash_attn_version()`.

    What:
    Rewrites the import of flash-attn's version, alone on its line and not inside a
    `try` that already guards it, to an assignment of the same name:
    `flash_attn_version = porter_runtime.flash_attn_version()`.

    Why:
    Once porter's twins run every flash-attn call, the version import is what is left:
    it fails without CUDA (`No module named 'flash_attn'`) before any of the module's
    code runs. LongLoRA keeps it for one check, `assert flash_attn_version >= "2.1.0"`
    before it uses a KV cache, a feature the twins have (blind round 15).

    Fix safety:
    Safe. Where torch sees CUDA the runtime imports flash_attn and returns its
    `__version__` at the same moment, raising the same ImportError where it is missing.
    Elsewhere it is flash_attn's own version where it imports, else the release whose
    semantics the twins follow (2.8.3), so checks of the version pass as with a current
    flash-attn.

    Known limits:
    `flash_attn.__version__` read through `import flash_attn` is left to the other
    flash-attn rules.
    """

    code = "TP104"
    name = "flash-attn-version"
    safety = Safety.SAFE
    needs = Needs(byte_patterns=literal_patterns(["__version__"]), words=frozenset({"flash_attn"}))

    valid = [
        "from flash_attn import __version__, flash_attn_func\n",
        "try:\n    from flash_attn import __version__ as fa_version\nexcept ImportError:\n    fa_version = None\n",
        "from xformers import __version__ as xformers_version\n",
    ]
    invalid = [
        Example(  # LongLoRA's llama_attn_replace.py
            "import torch\nfrom flash_attn import __version__ as flash_attn_version\n\n\n"
            "def forward_flashattn_inference(self, hidden_states, past_key_value=None):\n"
            "    if past_key_value is not None:\n"
            "        assert (\n"
            "            flash_attn_version >= \"2.1.0\"\n"
            "        ), \"past_key_value support requires flash-attn >= 2.1.0\"\n"
            "    return hidden_states\n",
            "import porter_runtime\nimport torch\nflash_attn_version = porter_runtime.flash_attn_version()\n\n\n"
            "def forward_flashattn_inference(self, hidden_states, past_key_value=None):\n"
            "    if past_key_value is not None:\n"
            "        assert (\n"
            "            flash_attn_version >= \"2.1.0\"\n"
            "        ), \"past_key_value support requires flash-attn >= 2.1.0\"\n"
            "    return hidden_states\n",
        ),
    ]

    def leave_SimpleStatementLine(self, original: cst.SimpleStatementLine,
                                  updated: cst.SimpleStatementLine) -> cst.BaseStatement:
        if len(original.body) != 1 or self.guarded():
            return updated
        name = version_import(original.body[0])
        if name is None:
            return updated
        new = cst.SimpleStatementLine(
            [cst.Assign([cst.AssignTarget(cst.Name(name))], self.runtime_call("flash_attn_version"))],
            leading_lines=updated.leading_lines, trailing_whitespace=updated.trailing_whitespace)
        return self.rewrite(original, new, "flash_attn's version is the installed release's on CUDA, and the "
                            "release the twins follow elsewhere")
