"""The torch version a manifest allows, against the one porter_runtime needs on a Mac (DEP106)."""

from __future__ import annotations

from porter.project.requirements import (
    TORCH_MINIMUM_TEXT,
    parse,
    pyproject_sites,
    requirements_sites,
    torch_bound,
)
from porter.rulebase.families.manifest_files import (
    PYPROJECT_PATTERNS,
    REQUIREMENTS_PATTERNS,
    basename,
)
from porter.rulebase.rule import Example, Safety, TextRule


class TorchMinimum(TextRule):
    """A torch requirement that admits no torch porter_runtime runs on (2.5) is reported.

    What:
    In requirements files and pyproject.toml dependencies, reports a torch specifier
    that admits no torch 2.5 or newer (`torch==1.13.1`, `torch>=1.10,<2.0`,
    `torch~=2.1.0`). Nothing is rewritten: a lower bound below 2.5 (`torch>=2.0`)
    is left as written, with no finding.

    Why:
    Ported code calls porter_runtime, whose MPS paths use `torch.autocast("mps")`
    and `torch.mps.recommended_max_memory()` (torch 2.5) and whose precision twins
    use `torch.amp.custom_fwd(device_type=...)` (torch 2.4). A specifier that rules
    out every such torch can't give a Mac what the port needs.

    Fix safety:
    Review only. A pin or a cap is a decision about the whole project, and raising
    a lower bound would change what a CUDA machine may keep installed, so porter
    changes neither. A bare lower bound needs nothing: pip installs the newest torch
    it allows, and the runtime warns once when it runs on MPS with an older torch.

    Known limits:
    setup.py and environment.yml (`pytorch>=1.13`) are not read; pre-release and
    local parts of a bound are compared by their release numbers.
    """

    code = "DEP106"
    name = "torch-minimum"
    safety = Safety.REVIEW
    patterns = REQUIREMENTS_PATTERNS + PYPROJECT_PATTERNS  # no `words`: names ignore case (Torch)

    valid = [
        Example("torch>=2.5\ntorchvision>=0.10\n", path="requirements.txt"),
        Example("torch\ntorch-geometric>=1.0\n", path="requirements.txt"),
        Example('[project]\ndependencies = ["torch>=2.6,<3"]\n', path="pyproject.toml"),
        Example("# torch==1.13\n", path="requirements.txt"),
        # what a CUDA machine installs stays the project's choice
        Example("numpy\ntorch>=1.10  # any recent torch\n", path="requirements.txt"),
        Example('Torch >= 2.0, < 3 ; python_version >= "3.9"\n', path="requirements.txt"),
        Example('[project]\ndependencies = [\n    "torch~=2.1",\n]\n', path="pyproject.toml"),
    ]
    invalid = [
        Example("torch==1.13.1\n", path="requirements.txt", line=1, message="allows no torch 2.5 or newer"),
        Example('[project.optional-dependencies]\nold = ["torch>=1.10,<2.0"]\n', path="pyproject.toml",
                line=2, message="allows no torch 2.5 or newer"),
        Example("numpy\ntorch~=2.1.0\n", path="requirements.txt", line=2),
    ]

    def check(self, text: str) -> str:
        sites = pyproject_sites(text) if basename(self.path) == "pyproject.toml" else requirements_sites(text)
        for site in sites:
            req = parse(text[site.start:site.end])
            if req is None or req.key != "torch" or req.spec is None:
                continue
            if torch_bound(req.specifier)[0] == "pinned":
                self.flag(site.line, f"torch{req.specifier.strip()} allows no torch {TORCH_MINIMUM_TEXT} or newer, "
                          "which porter_runtime needs on a Mac (MPS autocast and memory queries)",
                          column=site.column(text), before=req.text, suggestion=f"torch>={TORCH_MINIMUM_TEXT}")
        return text
