import shutil
from pathlib import Path

import pytest


@pytest.fixture
def copy_tree(tmp_path):
    def copy(src: Path, name: str = "repo") -> Path:
        dest = tmp_path / name
        shutil.copytree(src, dest, symlinks=True)
        return dest
    return copy
