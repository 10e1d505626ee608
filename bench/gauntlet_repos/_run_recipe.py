"""A gauntlet recipe as one command, for ``porter verify --against ORIGINAL --run CMD``:

    python bench/gauntlet_repos/_run_recipe.py NAME

run in the recipe's tree (its ``subdir``): the recipe's ``prepare`` and then each step, with
the step's environment (``{tree}`` filled in, its ``PYTHONPATH`` before the one the caller
set, which carries verify's emulation and seeds), each step's output printed as it comes,
and the first failing step's exit status as this command's. The gauntlet's ``--cuda-unchanged``
runs it on copies of the original and of the port (bench/gauntlet.py).
"""
from __future__ import annotations

import importlib
import os
import subprocess
import sys
from pathlib import Path

REPOS = Path(__file__).resolve().parent


def main(name: str) -> int:
    sys.path.insert(0, str(REPOS))
    from _recipe import step_environment

    recipe = importlib.import_module(name)
    tree = Path.cwd()
    recipe.prepare(tree)
    print(f"[recipe] prepared {name}", flush=True)
    for step in recipe.STEPS:
        env = step_environment(step, tree, os.environ)
        print(f"[recipe] step {step.name}", flush=True)
        try:
            done = subprocess.run(step.command.replace("{tree}", str(tree)), shell=True, executable="/bin/bash",
                                  cwd=tree, env=env, timeout=step.timeout, check=False)
        except subprocess.TimeoutExpired:
            print(f"[recipe] step {step.name} timed out after {step.timeout:g} s", flush=True)
            return 124
        if done.returncode != 0:
            print(f"[recipe] step {step.name} exited {done.returncode}", flush=True)
            return done.returncode
        missing = [p for p in step.outputs if not list(tree.glob(p))]
        if missing:
            print(f"[recipe] step {step.name}: exit 0 but no {', '.join(missing)}", flush=True)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
