"""A project built on an installed detectron2 (Mask2Former, blind round 18): its
``train_net.py`` starts from ``get_cfg()``, whose ``MODEL.DEVICE`` default is "cuda", and
merges a YAML file that switches AMP on. Neither value is in the project's Python. TP710
wraps ``get_cfg()`` in ``porter_runtime.detectron2_config``; the port then trains on the CPU.

detectron2 builds only from source, so the library here is its config and trainer choice
as detectron2 writes them, on yacs' real ``CfgNode`` (detectron2's base class):
``_C.MODEL.DEVICE = "cuda"``, ``_C.SOLVER.AMP = CN({"ENABLED": False})``, and
``AMPTrainer``'s ``assert torch.cuda.is_available()``.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from textwrap import dedent

import pytest

from porter_test_utils import python_without_porter, run_porter

pytest.importorskip("yacs")

LIBRARY = {
    "site/detectron2/__init__.py": "",
    "site/detectron2/config/__init__.py": "from .defaults import get_cfg\n",
    "site/detectron2/config/defaults.py": dedent("""\
        from yacs.config import CfgNode as CN

        _C = CN()
        _C.MODEL = CN()
        _C.MODEL.DEVICE = "cuda"
        _C.MODEL.WIDTH = 4
        _C.SOLVER = CN()
        _C.SOLVER.AMP = CN({"ENABLED": False})
        _C.SOLVER.MAX_ITER = 1


        def get_cfg():
            return _C.clone()
        """),
    "site/detectron2/engine.py": dedent("""\
        import torch


        def build_model(cfg):
            return torch.nn.Linear(cfg.MODEL.WIDTH, 1).to(torch.device(cfg.MODEL.DEVICE))


        def train(cfg, model):
            if cfg.SOLVER.AMP.ENABLED:
                assert torch.cuda.is_available(), "[AMPTrainer] CUDA is required for AMP training!"
            x = torch.ones(2, cfg.MODEL.WIDTH, device=cfg.MODEL.DEVICE)
            loss = model(x).sum()
            loss.backward()
            return float(loss)
        """),
}
PROJECT = {
    "configs/base.yaml": "SOLVER:\n  AMP:\n    ENABLED: True\n  MAX_ITER: 2\n",
    "train_net.py": dedent("""\
        import argparse

        from detectron2.config import get_cfg
        from detectron2.engine import build_model, train


        def setup(args):
            cfg = get_cfg()
            cfg.merge_from_file(args.config_file)
            cfg.freeze()
            return cfg


        if __name__ == "__main__":
            parser = argparse.ArgumentParser()
            parser.add_argument("--config-file", default="configs/base.yaml")
            cfg = setup(parser.parse_args())
            print("trained", cfg.MODEL.DEVICE, cfg.SOLVER.AMP.ENABLED, train(cfg, build_model(cfg)) is not None)
        """),
}


def _tree(root: Path, files: dict) -> Path:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def _run(repo: Path, site: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "PORTER_QUIET": "1", "PYTHONPATH": str(site)}
    return subprocess.run(python_without_porter("train_net.py"), cwd=repo, capture_output=True, text=True,
                          timeout=300, env=env)


def test_a_detectron2_project_trains_off_cuda_once_get_cfg_is_wrapped(tmp_path):
    site = _tree(tmp_path, LIBRARY) / "site"
    repo = _tree(tmp_path / "repo", PROJECT)
    before = _run(repo, site)
    assert before.returncode != 0 and "CUDA" in before.stderr
    assert run_porter("migrate", repo, "--write", "-q").returncode == 0
    ported = (repo / "train_net.py").read_text()
    assert "cfg = porter_runtime.detectron2_config(get_cfg())" in ported
    assert "porter_runtime.detectron2_config(cfg).freeze()" in ported
    after = _run(repo, site)
    assert after.returncode == 0, after.stderr
    assert after.stdout.split() == ["trained", "cpu", "False", "True"]
    assert "AMPTrainer runs only on CUDA" in after.stderr
    assert run_porter("migrate", repo, "--diff", "-q").stdout == b""
