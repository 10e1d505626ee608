"""Lightning's Fabric and Trainer told to use CUDA: `accelerator=` and a GPU-only
`strategy=` go through porter_runtime (TP403)."""

from __future__ import annotations

from textwrap import dedent

import libcst as cst

from porter.rulebase.matching import Ambiguous
from porter.rulebase.rule import Example, Needs, Rule, Safety, string_value

_TARGETS = frozenset({
    "lightning.Fabric", "lightning.fabric.Fabric", "lightning_fabric.Fabric", "lightning.fabric.fabric.Fabric",
    "lightning.Trainer", "lightning.pytorch.Trainer", "lightning.pytorch.trainer.Trainer",
    "lightning.pytorch.trainer.trainer.Trainer", "pytorch_lightning.Trainer", "pytorch_lightning.trainer.Trainer",
    "pytorch_lightning.trainer.trainer.Trainer",
})
#: Strategies written as a name that run without CUDA: left as written.
_ANYWHERE = frozenset({"auto", "ddp", "ddp_spawn", "ddp_fork", "ddp_notebook", "single_device", "dp",
                       "ddp_find_unused_parameters_true", "ddp_find_unused_parameters_false"})


class LightningCudaChoices(Rule):
    """`Fabric(accelerator="cuda", strategy=FSDPStrategy(...))` asks porter_runtime for both.

    What:
    In a call of Lightning's `Fabric` or `Trainer` (`lightning`, `lightning.fabric`,
    `pytorch_lightning`), `accelerator="cuda"` (or `"gpu"`) becomes
    `accelerator=porter_runtime.lightning_accelerator("cuda")`, and a `strategy=` that is
    not one of Lightning's device-agnostic names (`"auto"`, `"ddp"`, ...) becomes
    `strategy=porter_runtime.lightning_strategy(...)` around what was written.

    Why:
    Off CUDA, Lightning refuses the accelerator ("CUDAAccelerator can not run on your
    system") and its FSDP and DeepSpeed strategies ("FSDP is only available on GPU"):
    lit-llama's finetuning and pretraining scripts stop at their first line (blind round 5).

    Fix safety:
    Safe. On CUDA both functions return what they are given. Elsewhere the accelerator is
    `"mps"` where Lightning can use a Mac's GPU and `"cpu"` otherwise, and an FSDP or
    DeepSpeed strategy (an instance or its name) becomes `"auto"` with a warning: one
    device, or DDP over Gloo for several processes, the model unsharded. Any other strategy
    is returned as it is.

    Known limits:
    Only keywords of the call itself: a config dict filled first
    (`trainer_config["accelerator"] = "gpu"`, then `Trainer(**trainer_config)`) and
    `devices=N` greater than one on a Mac (Lightning takes one MPS device) are not
    rewritten.
    """

    code = "TP403"
    name = "lightning-cuda-choices"
    safety = Safety.SAFE
    needs = Needs(calls_only=True, targets=_TARGETS)

    valid = [
        "import lightning as L\nfabric = L.Fabric(accelerator='auto', devices=1)\n",
        "import lightning as L\nfabric = L.Fabric(accelerator='cpu', strategy='ddp')\n",
        "from pytorch_lightning import Trainer\ntrainer = Trainer(max_epochs=1)\n",
        "from myproject import Trainer\ntrainer = Trainer(accelerator='gpu', strategy=strategy)\n",  # a lookalike
        "def build(L):\n    return L.Fabric(accelerator='cuda')\n",  # a parameter shadowing nothing imported
    ]
    invalid = [
        Example(  # lit-llama's finetune/lora.py
            dedent("""\
                import lightning as L


                def main(data_dir="data/alpaca", out_dir="out/lora/alpaca"):
                    fabric = L.Fabric(accelerator="cuda", devices=1, precision="bf16-true")
                    fabric.launch()
                    fabric.seed_everything(1337 + fabric.global_rank)
                """),
            dedent("""\
                import porter_runtime
                import lightning as L


                def main(data_dir="data/alpaca", out_dir="out/lora/alpaca"):
                    fabric = L.Fabric(accelerator=porter_runtime.lightning_accelerator("cuda"), devices=1, precision="bf16-true")
                    fabric.launch()
                    fabric.seed_everything(1337 + fabric.global_rank)
                """),
        ),
        Example(  # lit-llama's pretrain/redpajama.py: FSDP, built before the call
            dedent("""\
                from functools import partial

                import lightning as L
                from lightning.fabric.strategies import FSDPStrategy
                from torch.distributed.fsdp.wrap import transformer_auto_wrap_policy


                def main(devices: int = 4):
                    auto_wrap_policy = partial(transformer_auto_wrap_policy, transformer_layer_cls={Block})
                    strategy = FSDPStrategy(auto_wrap_policy=auto_wrap_policy, activation_checkpointing=Block)

                    fabric = L.Fabric(
                        accelerator="cuda", devices=devices, precision="bf16-mixed", strategy=strategy
                    )
                    fabric.launch()
                """),
            dedent("""\
                import porter_runtime
                from functools import partial

                import lightning as L
                from lightning.fabric.strategies import FSDPStrategy
                from torch.distributed.fsdp.wrap import transformer_auto_wrap_policy


                def main(devices: int = 4):
                    auto_wrap_policy = partial(transformer_auto_wrap_policy, transformer_layer_cls={Block})
                    strategy = FSDPStrategy(auto_wrap_policy=auto_wrap_policy, activation_checkpointing=Block)

                    fabric = L.Fabric(
                        accelerator=porter_runtime.lightning_accelerator("cuda"), devices=devices, precision="bf16-mixed", strategy=porter_runtime.lightning_strategy(strategy)
                    )
                    fabric.launch()
                """),
        ),
        Example(  # a from-import, and the `accelerator` of a Trainer that runs without a strategy
            "from lightning.fabric import Fabric\nfrom lightning.pytorch import Trainer as PLTrainer\n\n"
            "fabric = Fabric(accelerator='cuda', devices=1)\ntrainer = PLTrainer(accelerator='gpu', max_steps=10)\n",
            "import porter_runtime\nfrom lightning.fabric import Fabric\nfrom lightning.pytorch import Trainer as PLTrainer\n\n"
            "fabric = Fabric(accelerator=porter_runtime.lightning_accelerator('cuda'), devices=1)\n"
            "trainer = PLTrainer(accelerator=porter_runtime.lightning_accelerator('gpu'), max_steps=10)\n",
        ),
        Example(
            "import pytorch_lightning as pl\n"
            "trainer = pl.Trainer(accelerator='gpu', devices=8, strategy='deepspeed_stage_2', max_epochs=3)\n",
            "import porter_runtime\nimport pytorch_lightning as pl\n"
            "trainer = pl.Trainer(accelerator=porter_runtime.lightning_accelerator('gpu'), devices=8, "
            "strategy=porter_runtime.lightning_strategy('deepspeed_stage_2'), max_epochs=3)\n",
        ),
    ]

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        name = self.qualname(original.func)
        if name is None or isinstance(name, Ambiguous) or name not in _TARGETS:
            return updated
        args, said = list(updated.args), []
        for i, arg in enumerate(args):
            keyword = arg.keyword.value if arg.keyword is not None else None
            if keyword == "accelerator" and str(string_value(arg.value)).lower() in ("cuda", "gpu"):
                args[i] = arg.with_changes(value=self.runtime_call("lightning_accelerator", arg.value))
                said.append(f"accelerator={string_value(arg.value)!r}")
            elif keyword == "strategy" and string_value(arg.value) not in _ANYWHERE and not _is_runtime(arg.value):
                args[i] = arg.with_changes(value=self.runtime_call("lightning_strategy", arg.value))
                said.append("its strategy")
        if not said:
            return updated
        return self.rewrite(original, updated.with_changes(args=args),
                            f"Lightning's {' and '.join(said)} need CUDA; porter_runtime keeps them on CUDA and "
                            "chooses what runs here elsewhere")


def _is_runtime(node: cst.BaseExpression) -> bool:
    """Already ``porter_runtime.lightning_strategy(...)`` (a second run), whatever the binding."""
    return isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and \
        node.func.attr.value == "lightning_strategy"
