"""bench/recipe_differential.py: a gauntlet recipe run on two trees and everything they
wrote compared (the CUDA-unchanged check on real repositories, run on a GPU machine)."""
from __future__ import annotations

import importlib.util
import json
import math
import sys
from pathlib import Path

import torch

_SPEC = importlib.util.spec_from_file_location(
    "recipe_differential", Path(__file__).resolve().parent.parent / "bench" / "recipe_differential.py")
rd = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(rd)  # type: ignore[union-attr]


def test_checkpoints_text_and_images_are_compared_by_content(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir(), b.mkdir()
    torch.save({"model": {"w": torch.ones(3)}, "config": {"device": "cuda", "lr": 1e-3}}, a / "ckpt.pt")
    torch.save({"model": {"w": torch.ones(3)}, "config": {"device": "cuda:0", "lr": 1e-3}}, b / "ckpt.pt")
    assert math.isinf(rd.file_difference(a / "ckpt.pt", b / "ckpt.pt"))
    assert rd.DETAIL[str(b / "ckpt.pt")] == ["/config/device: 'cuda' vs 'cuda:0' (inf)"]
    # text: number by number; lines that time the machine and traceback line numbers left out
    (a / "log.txt").write_text('step 1 loss 2.5\nepoch took 3.2 sec\n  File "train.py", line 286, in main\n')
    (b / "log.txt").write_text('step 1 loss 2.5\nepoch took 9.9 sec\n  File "train.py", line 287, in main\n')
    assert rd.file_difference(a / "log.txt", b / "log.txt") == 0.0
    (a / "dit.txt").write_text("[2026-11-28 18:56:48] (step=0000001) Train Loss: 0.9940, Train Steps/Sec: 1.03\n")
    (b / "dit.txt").write_text("[2026-11-28 18:58:22] (step=0000001) Train Loss: 0.9940, Train Steps/Sec: 0.97\n")
    assert rd.file_difference(a / "dit.txt", b / "dit.txt") == 0.0
    (b / "log.txt").write_text('step 1 loss 2.6\nepoch took 9.9 sec\n  File "train.py", line 287, in main\n')
    assert math.isclose(rd.file_difference(a / "log.txt", b / "log.txt"), 0.1 / 2.6)
    (b / "log.txt").write_text('step 1 loss 2.5\n  File "other.py", line 287, in main\n')
    assert math.isinf(rd.file_difference(a / "log.txt", b / "log.txt"))


def test_a_file_named_by_the_clock_pairs_with_the_other_sides(tmp_path):
    work = tmp_path
    for side, stamp, value in (("orig", "1795892194", 1.0), ("port", "1795892228", 1.0)):
        folder = work / f"out-{side}" / "logs"
        folder.mkdir(parents=True)
        (folder / f"events.{stamp}.vm").write_text(f"loss {value}\n")
    ra = {"written": ["logs/events.1795892194.vm"], "losses": {"train": [2.0]}, "steps": [{"exit": 0}]}
    rb = {"written": ["logs/events.1795892228.vm"], "losses": {"train": [2.0]}, "steps": [{"exit": 0}]}
    rows = rd.compare(work, "orig", "port", ra, rb)
    assert rows == {"logs/events.#.vm": 0.0, "printed losses of train": 0.0, "steps that ran": 0.0}
    rb["steps"] = [{"exit": 1}]
    assert math.isinf(rd.compare(work, "orig", "port", ra, rb)["steps that ran"])
    rb["steps"] = [{"exit": 124}]
    assert math.isnan(rd.compare(work, "orig", "port", ra, rb)["steps that ran"])


def test_a_recipe_runs_on_both_sides_and_a_change_is_found(tmp_path):
    """End to end on the CPU: a staged 'repository' whose port changes one output and not
    another; the original runs twice to show the change is not its own spread."""
    stage = tmp_path / "stage"
    recipes = stage / "recipes"
    recipes.mkdir(parents=True)
    (recipes / "_recipe.py").write_text((Path(rd.HERE) / "gauntlet_repos" / "_recipe.py").read_text())
    (recipes / "toyrepo.py").write_text(
        "from _recipe import Step\n"
        "def prepare(tree):\n    (tree / '_gauntlet').mkdir(exist_ok=True)\n"
        "STEPS = [Step('train', 'python train.py', outputs=['_gauntlet/w.pt'], timeout=60)]\n")
    script = ("import json, torch\nw = torch.randn(4)\nprint('loss', float(w.sum()))\n"
              "json.dump({{'lr': 0.1, 'epoch_time': __import__('time').time()}}, open('_gauntlet/cfg.json', 'w'))\n"
              "torch.save({{'w': w * {scale}}}, '_gauntlet/w.pt')\n")
    for side, scale in (("orig", "1.0"), ("port", "1.5")):
        (stage / "toyrepo" / side).mkdir(parents=True)
        (stage / "toyrepo" / side / "train.py").write_text(script.format(scale=scale))
    (stage / "manifest.json").write_text(json.dumps({"porter": "test", "repos": [
        {"name": "toyrepo", "subdir": "", "commit": "0" * 40, "requirements": []}]}))
    result = rd.check(stage, "toyrepo", tmp_path / "scratch", sys.executable, "", False, 60, 1e9)
    assert result["failed_a"] is None and result["failed_b"] is None, result
    verdicts = {k: v["verdict"] for k, v in result["files"].items()}
    assert verdicts == {"_gauntlet/cfg.json": "same", "_gauntlet/w.pt": "DIFFERS",
                        "printed losses of train": "same", "steps that ran": "same"}, result["files"]
    assert result["files"]["_gauntlet/w.pt"]["spread"] == 0.0  # seeded: the original equals itself
