"""What the dependency-manifest rules (DEP1xx) share: which files they read, a file or
extra meant for CUDA machines only, the message of a CUDA-only package given a platform marker.

Rewrites touch only a requirement's own span: comments, order, spacing and pip options stay
as they were."""

from __future__ import annotations

import re

REQUIREMENTS_PATTERNS = ("*requirements*.txt", "*requirements*.in")
PYPROJECT_PATTERNS = ("pyproject.toml",)
CONDA_PATTERNS = ("environment*.yml", "environment*.yaml", "conda*.yml", "conda*.yaml")

# A file, extra or group meant for CUDA machines only (requirements-cuda.txt, the
# `gpu` extra, `cu121`): CUDA-only packages belong there and are left alone.
CUDA_NAMED = re.compile(r"(?:^|[-_.])(?:cuda|gpu|cu\d{2,3})(?:[-_.]|$)", re.I)


def basename(path: str) -> str:
    return path.replace("\\", "/").rsplit("/", 1)[-1]


def marker_message(name: str, marker: str, cpu_linux: str) -> str:
    return (f"{name} is CUDA-only and does not install on a Mac: now required only where "
            f"`{marker}`, so Linux and Windows are unchanged; {cpu_linux}")
