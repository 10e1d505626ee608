"""minGPT's two projects, tiny: projects/adder (gpt-nano learning 1-digit addition, with its
greedy-decoding eval over both splits at iteration 0) and projects/chargpt (gpt-nano on a synthetic
input.txt, sampling and saving model.pt at iteration 0), 2 iterations each through the repo's own
``--section.key=value`` config overrides. The package is found with PYTHONPATH=. (the README's
``pip install -e .`` would leave the tree in the shared recipe environment)."""

from pathlib import Path

from _recipe import Step, synthetic_text


def prepare(tree: Path) -> None:
    # chargpt reads input.txt from the working directory; its sampling prompt "O God, O God!" must
    # be made of characters of the text
    (tree / "input.txt").write_text("O God, O God!\n" + synthetic_text(words=3000))


STEPS = [
    Step("adder", "PYTHONPATH=. python projects/adder/adder.py --system.work_dir=_gauntlet/adder "
                  "--data.ndigit=1 --trainer.max_iters=2 --trainer.batch_size=8 --trainer.num_workers=2",
         outputs=["_gauntlet/adder/config.json"], timeout=180),
    Step("chargpt", "PYTHONPATH=. python projects/chargpt/chargpt.py --system.work_dir=_gauntlet/chargpt "
                    "--model.model_type=gpt-nano --data.block_size=32 --trainer.max_iters=2 "
                    "--trainer.batch_size=4 --trainer.num_workers=0",
         outputs=["_gauntlet/chargpt/model.pt"], timeout=180),
]
