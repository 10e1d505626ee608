"""Lightning's Fabric and Trainer told to use CUDA: `accelerator=` and a GPU-only
`strategy=`, written in the call or read from the command line, go through porter_runtime
(TP403)."""

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
#: Lightning 1.x's ``Trainer.from_argparse_args(args)``: the choices come from the command line.
_FROM_ARGS = frozenset(f"{t}.from_argparse_args" for t in _TARGETS if t.endswith("Trainer"))
#: Hydra builds the Trainer from its config (``_target_: pytorch_lightning.Trainer``): safari's train.py.
_INSTANTIATE = "hydra.utils.instantiate"
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
    `strategy=porter_runtime.lightning_strategy(...)` around what was written. An
    accelerator given as a value (`accelerator=args.accelerator`) is wrapped the same way,
    and so are the options of `Trainer.from_argparse_args(args)`:
    `porter_runtime.lightning_args(args)`.

    Why:
    Off CUDA, Lightning refuses the accelerator ("CUDAAccelerator can not run on your
    system") and its FSDP and DeepSpeed strategies ("FSDP is only available on GPU"):
    lit-llama's finetuning and pretraining scripts stop at their first line (blind round 5),
    and RWKV-LM's trainer, told `--accelerator gpu --strategy deepspeed_stage_2` by its
    shell scripts, at `Trainer.from_argparse_args(args)` (blind round 8).

    Fix safety:
    Safe. On CUDA both functions return what they are given. Elsewhere the accelerator is
    `"mps"` where Lightning can use a Mac's GPU and `"cpu"` otherwise, and an FSDP or
    DeepSpeed strategy (an instance or its name) becomes `"auto"` with a warning: one
    device, or DDP over Gloo for several processes, the model unsharded. Any other strategy
    is returned as it is. `lightning_args` changes the namespace in place off CUDA (so the
    script's own `if "deepspeed" in args.strategy:` that follows sees what Lightning got),
    and unsets Lightning 1.x's `gpus` count there; on CUDA it returns it untouched. A
    `gpus=N` written in a `Trainer(...)` call becomes `gpus=porter_runtime.cuda_option(N)`:
    N on CUDA, None (no GPU asked for) elsewhere.

    Options passed as a mapping (`pl.Trainer(logger=logger, **config.trainer)`, S4's
    Hydra trainer config with `accelerator: gpu`; `Trainer(**vars(args))`) become
    `**porter_runtime.lightning_options(config.trainer)`: the mapping itself on CUDA,
    elsewhere a dict copy whose accelerator, strategy and `gpus` are chosen as above.

    `hydra.utils.instantiate(config.trainer, ...)`, where a YAML config of the tree has
    `_target_: pytorch_lightning.Trainer` (safari's `configs/trainer/default.yaml`, with
    `accelerator: gpu`), gets `porter_runtime.lightning_options(config.trainer)`, whose
    copy keeps `_target_`.

    Known limits:
    Only the call's own keywords and mappings, `from_argparse_args` and Hydra's
    `instantiate` of a config named like a trainer; `devices=N`
    greater than one on a Mac (Lightning takes one MPS device) is not rewritten.
    """

    code = "TP403"
    name = "lightning-cuda-choices"
    safety = Safety.SAFE
    needs = Needs(calls_only=True, targets=_TARGETS | {_INSTANTIATE})

    valid = [
        "import lightning as L\nfabric = L.Fabric(accelerator='auto', devices=1)\n",
        "import lightning as L\nfabric = L.Fabric(accelerator='cpu', strategy='ddp')\n",
        "from pytorch_lightning import Trainer\ntrainer = Trainer(max_epochs=1)\n",
        "from myproject import Trainer\ntrainer = Trainer(accelerator='gpu', strategy=strategy)\n",  # a lookalike
        "def build(L):\n    return L.Fabric(accelerator='cuda')\n",  # a parameter shadowing nothing imported
        # Hydra instantiating a config no YAML of the tree makes a Lightning Trainer
        "import hydra\ntrainer = hydra.utils.instantiate(config.trainer, logger=logger)\n",
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
        Example(  # RWKV-LM's train.py: the accelerator and strategy come from its shell scripts
            dedent("""\
                from argparse import ArgumentParser

                from pytorch_lightning import Trainer

                parser = ArgumentParser()
                parser = Trainer.add_argparse_args(parser)
                args = parser.parse_args()
                trainer = Trainer.from_argparse_args(args, callbacks=[train_callback(args)])
                if "deepspeed" in args.strategy:
                    trainer.strategy.config["zero_optimization"]["allgather_bucket_size"] = args.ds_bucket_mb * 1000 * 1000
                """),
            dedent("""\
                import porter_runtime
                from argparse import ArgumentParser

                from pytorch_lightning import Trainer

                parser = ArgumentParser()
                parser = Trainer.add_argparse_args(parser)
                args = parser.parse_args()
                trainer = Trainer.from_argparse_args(porter_runtime.lightning_args(args), callbacks=[train_callback(args)])
                if "deepspeed" in args.strategy:
                    trainer.strategy.config["zero_optimization"]["allgather_bucket_size"] = args.ds_bucket_mb * 1000 * 1000
                """),
        ),
        Example(  # ControlNet's tutorial_train.py: Lightning 1.x's gpus count (blind round 10)
            dedent("""\
                import pytorch_lightning as pl

                logger = ImageLogger(batch_frequency=logger_freq)
                trainer = pl.Trainer(gpus=1, precision=32, callbacks=[logger])
                trainer.fit(model, dataloader)
                """),
            dedent("""\
                import porter_runtime
                import pytorch_lightning as pl

                logger = ImageLogger(batch_frequency=logger_freq)
                trainer = pl.Trainer(gpus=porter_runtime.cuda_option(1), precision=32, callbacks=[logger])
                trainer.fit(model, dataloader)
                """),
        ),
        Example(  # state-spaces/s4's train.py: configs/trainer/default.yaml says `accelerator: gpu`
            dedent("""\
                import pytorch_lightning as pl


                def create_trainer(config, logger, callbacks, profiler):
                    return pl.Trainer(
                        logger=logger,
                        callbacks=callbacks,
                        profiler=profiler,
                        **config.trainer,
                    )
                """),
            dedent("""\
                import porter_runtime
                import pytorch_lightning as pl


                def create_trainer(config, logger, callbacks, profiler):
                    return pl.Trainer(
                        logger=logger,
                        callbacks=callbacks,
                        profiler=profiler,
                        **porter_runtime.lightning_options(config.trainer),
                    )
                """),
        ),
        Example(  # safari's train.py: Hydra builds the Trainer of configs/trainer/default.yaml
            dedent("""\
                import hydra


                def create_trainer(config, callbacks, logger):
                    trainer = hydra.utils.instantiate(
                        config.trainer, callbacks=callbacks, logger=logger)
                    return trainer
                """),
            dedent("""\
                import porter_runtime
                import hydra


                def create_trainer(config, callbacks, logger):
                    trainer = hydra.utils.instantiate(
                        porter_runtime.lightning_options(config.trainer), callbacks=callbacks, logger=logger)
                    return trainer
                """),
            path="train.py",
            project=(("configs/trainer/default.yaml", "_target_: pytorch_lightning.Trainer\n\ndevices: 1\n"
                      "accelerator: gpu\nmax_epochs: 200\n"),),
        ),
        Example(  # an accelerator read from a config
            "import lightning as L\n\n\ndef build(cfg):\n"
            "    return L.Trainer(accelerator=cfg.trainer.accelerator, devices=cfg.trainer.devices)\n",
            "import porter_runtime\nimport lightning as L\n\n\ndef build(cfg):\n"
            "    return L.Trainer(accelerator=porter_runtime.lightning_accelerator(cfg.trainer.accelerator), "
            "devices=cfg.trainer.devices)\n",
        ),
    ]

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        name = self.qualname(original.func)
        if name == _INSTANTIATE:
            return self._instantiated(original, updated)
        if name is None or isinstance(name, Ambiguous) or name not in _TARGETS | _FROM_ARGS:
            return updated
        args, said = list(updated.args), []
        if name in _FROM_ARGS:
            if not args or args[0].keyword is not None or args[0].star or _is_runtime(args[0].value):
                return updated
            args[0] = args[0].with_changes(value=self.runtime_call("lightning_args", args[0].value))
            return self.rewrite(original, updated.with_changes(args=args),
                                "the accelerator and strategy Lightning reads from the command line may name CUDA "
                                "(--accelerator gpu, --strategy deepspeed_stage_2); porter_runtime keeps them on "
                                "CUDA and chooses what runs here elsewhere")
        for i, arg in enumerate(args):
            if arg.star == "**" and not _is_runtime(arg.value):
                args[i] = arg.with_changes(value=self.runtime_call("lightning_options", arg.value))
                said.append("options (from a mapping)")
                continue
            keyword = arg.keyword.value if arg.keyword is not None else None
            value = string_value(arg.value)
            if keyword == "accelerator" and (str(value).lower() in ("cuda", "gpu")
                                             or (_is_value(arg.value) and not _is_runtime(arg.value))):
                args[i] = arg.with_changes(value=self.runtime_call("lightning_accelerator", arg.value))
                said.append(f"accelerator={value!r}" if value is not None else "its accelerator")
            elif keyword == "strategy" and string_value(arg.value) not in _ANYWHERE and not _is_runtime(arg.value):
                args[i] = arg.with_changes(value=self.runtime_call("lightning_strategy", arg.value))
                said.append("its strategy")
            elif keyword == "gpus" and name.endswith("Trainer") and not _no_gpus(arg.value) and not _is_runtime(arg.value):
                args[i] = arg.with_changes(value=self.runtime_call("cuda_option", arg.value))
                said.append("its gpus count")
        if not said:
            return updated
        return self.rewrite(original, updated.with_changes(args=args),
                            f"Lightning's {' and '.join(said)} need CUDA; porter_runtime keeps them on CUDA and "
                            "chooses what runs here elsewhere")


    def _instantiated(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        """``hydra.utils.instantiate(config.trainer, ...)`` where the tree's YAML builds a
        Lightning Trainer: the config goes through ``lightning_options`` (its ``_target_`` kept)."""
        project = self.ctx.project
        args = list(updated.args)
        if project is None or not project.lightning_trainer_configs or not args or args[0].keyword is not None \
                or args[0].star or _is_runtime(args[0].value):
            return updated
        first = original.args[0].value
        named = first.attr.value if isinstance(first, cst.Attribute) else first.value if isinstance(first, cst.Name) \
            else ""
        if "trainer" not in named.lower():
            return updated
        args[0] = args[0].with_changes(value=self.runtime_call("lightning_options", args[0].value))
        return self.rewrite(original, updated.with_changes(args=args),
                            "the Lightning Trainer this config builds may ask for CUDA (`accelerator: gpu`, `gpus:`); "
                            "porter_runtime keeps its options on CUDA and chooses what runs here elsewhere")


def _is_value(node: cst.BaseExpression) -> bool:
    """A value read at run time (``args.accelerator``, ``cfg["accelerator"]``, ``pick()``),
    not a literal: what it holds may be "gpu"."""
    if isinstance(node, cst.Name):
        return node.value not in ("None", "True", "False")
    return isinstance(node, (cst.Attribute, cst.Subscript, cst.Call))


def _no_gpus(node: cst.BaseExpression) -> bool:
    """``gpus=None`` / ``gpus=0``: no GPU asked for."""
    return (isinstance(node, cst.Name) and node.value == "None") or \
        (isinstance(node, cst.Integer) and node.value == "0")


def _is_runtime(node: cst.BaseExpression) -> bool:
    """Already ``porter_runtime.lightning_strategy(...)`` (or its accelerator or namespace
twin: a second run), whatever the binding."""
    return isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and \
        node.func.attr.value in ("lightning_strategy", "lightning_accelerator", "lightning_args", "cuda_option",
                                "lightning_options")


class LightningCheckpointLocation(Rule):
    """`Model.load_from_checkpoint(path)` gets `map_location=porter_runtime.map_location()`.

    What:
    In a repository with a class derived from Lightning's `LightningModule` and no
    `load_from_checkpoint` of its own, a call `X.load_from_checkpoint(path, ...)` that
    gives no `map_location` (by keyword, or as the second positional argument, where
    Lightning's signature has it) gets `map_location=porter_runtime.map_location()`.

    Why:
    A checkpoint a GPU trained holds CUDA storages, and Lightning's loader, like
    `torch.load`, puts them back on CUDA: `RuntimeError: Attempting to deserialize object
    on a CUDA device but torch.cuda.is_available() is False` (S4's `generate.py` and
    `checkpoints/evaluate.py`, blind round 13).

    Fix safety:
    Safe. On CUDA `porter_runtime.map_location()` is None, Lightning's own default, so the
    call is the same. Elsewhere it is the CPU on a Mac (Lightning then moves the model as
    it always does) and the resolved device otherwise, as PT601 does for `torch.load`.

    Known limits:
    The receiver is not resolved: in such a repository every `load_from_checkpoint` call
    is taken for Lightning's. A call with `**kwargs` is left alone.
    """

    code = "TP404"
    name = "lightning-checkpoint-location"
    safety = Safety.SAFE
    needs = Needs(words=frozenset({"load_from_checkpoint"}), whole_file=True,
                  project=lambda project, rel: project.lightning_loads)

    valid = [
        # no LightningModule in the repository (the example's tree): another library's loader
        "model = Model.load_from_checkpoint(path)\n",
        Example(
            "model = SequenceLightningModule.load_from_checkpoint(path, 'cpu')\n",
            project=(("train.py", "import pytorch_lightning as pl\n\nclass SequenceLightningModule(pl.LightningModule):\n"
                                  "    pass\n"),),
        ),
    ]
    invalid = [
        Example(  # state-spaces/s4's generate.py
            dedent("""\
                from train import SequenceLightningModule


                def load(ckpt_path, config):
                    model = SequenceLightningModule.load_from_checkpoint(ckpt_path, config=config)
                    return model.eval()
                """),
            dedent("""\
                import porter_runtime
                from train import SequenceLightningModule


                def load(ckpt_path, config):
                    model = SequenceLightningModule.load_from_checkpoint(ckpt_path, config=config, map_location=porter_runtime.map_location())
                    return model.eval()
                """),
            path="generate.py",
            project=(("train.py", "import pytorch_lightning as pl\n\nclass SequenceLightningModule(pl.LightningModule):\n"
                                  "    pass\n"),),
        ),
    ]

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        func = original.func
        project = self.ctx.project
        if not isinstance(func, cst.Attribute) or func.attr.value != "load_from_checkpoint" \
                or project is None or not project.lightning_loads:
            return updated
        if any(a.star for a in original.args) or any(a.keyword is not None and a.keyword.value == "map_location"
                                                      for a in original.args):
            return updated
        if len([a for a in original.args if a.keyword is None]) != 1:
            return updated  # no path, or the second positional argument is map_location
        last = updated.args[-1]
        args = [*updated.args[:-1], last.with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))),
                cst.Arg(self.runtime_call("map_location"), keyword=cst.Name("map_location"),
                        equal=cst.AssignEqual(whitespace_before=cst.SimpleWhitespace(""),
                                              whitespace_after=cst.SimpleWhitespace("")))]
        return self.rewrite(original, updated.with_changes(args=args),
                            "a Lightning checkpoint a GPU wrote loads where it runs (None, Lightning's default, on CUDA)")
