"""Beyond Python source: configs and shell scripts that assume CUDA (findings only)."""

from __future__ import annotations

from textwrap import dedent

import re
from typing import Iterator

from porter.rulebase.cuda_packages import is_cuda_only_module
from porter.rulebase.rule import CONFIG_PATTERNS, INFO, SHELL_PATTERNS, Example, Safety, TextRule
from porter.rulebase.syntax import hides_gpus


# A key that names a device, set to a CUDA device, at the start of a line:
# `device: cuda` (YAML), `- device: cuda:0`, `device = "cuda"` (TOML, INI), `"device": "cuda"` (JSON).
_CONFIG_DEVICE = re.compile(
    r"""^\s*(?:-\s+)?(?P<key>["']?[\w.-]*device[\w.-]*["']?)\s*[:=]\s*"""
    r"""(?P<q>["']?)(?P<value>cuda(?::\d+)?)(?P=q)\s*(?:[,#;]|$)""",
    re.I,
)


def _lines(text: str) -> Iterator[tuple[int, str]]:
    for number, line in enumerate(text.splitlines(), 1):
        yield number, line


def _uncommented(line: str, marker: str = "#") -> str:
    """The part of a line before a comment (good enough: configs rarely quote '#')."""
    return line.split(marker, 1)[0] if marker in line else line


class ConfigDeviceCuda(TextRule):
    """A config file sets a device to `cuda`.

    What:
    Reports `device: cuda` (and `"device": "cuda:0"`, `device = "cuda"`, ...) in YAML,
    JSON, TOML, INI and cfg files.

    Why:
    The value reaches `torch.device(...)` or `.to(...)` at run time and fails there
    without CUDA: `Torch not compiled with CUDA enabled`.

    Fix safety:
    Not rewritten: porter can't know which code reads the key, or whether that code
    accepts anything else. Override the value when you run on a Mac (`device=mps`,
    `--device cpu`), or have the code that reads it pass it through
    `porter_runtime.device(value)`, which maps `cuda` to the resolved device and keeps
    it on CUDA.

    The same setting in many configs (one per model size and recipe) is one finding, on
    the first of them in path order, which counts the others; each other one is a note:
    the code that reads the key is where the fix goes, once.

    Known limits:
    Only keys whose name contains "device" are read; values like `gpu` or a device
    list are not.
    """

    code = "PT701"
    name = "config-device-cuda"
    repeated_setting = True
    safety = Safety.REVIEW
    patterns = CONFIG_PATTERNS
    words = frozenset({"cuda"})

    valid = [
        Example("device: cpu\nbackend: cuda\n", path="config.yaml"),
        Example('{"device": "mps"}\n', path="config.json"),
        Example("# device: cuda\n", path="config.yaml"),
        Example('{"description": "uses device=\'cuda\' kwargs"}\n', path="notes.json"),
    ]
    invalid = [
        Example("model:\n  width: 64\ndevice: cuda\n", path="config.yaml"),
        Example('{\n  "device": "cuda:0"\n}\n', path="train.json"),
        Example('[trainer]\ndevice = "cuda"  # the GPU\n', path="pyproject.toml"),
        Example("runs:\n  - device: cuda:1\n", path="sweep.yml"),
    ]

    def check(self, text: str) -> str:
        for number, line in _lines(text):
            match = _CONFIG_DEVICE.search(line)
            if match:
                self.flag(number, f"config sets {match.group('key').strip(chr(34) + chr(39))} to "
                          f"{match.group('value')}, which fails without CUDA",
                          column=match.start() + 1, before=line,
                          suggestion="override it on a Mac (e.g. device=mps) or read it through "
                                     "porter_runtime.device(value)")
        return text


#: Hydra's `_target_: pkg.mod.Class` (YAML, or JSON's "_target_": "..."): the class the config builds.
_HYDRA_TARGET = re.compile(r"""["']?_target_["']?\s*:\s*["']?(?P<target>[A-Za-z_][\w.]*)""")
#: An accelerate config (`accelerate config`'s YAML) that launches DeepSpeed's engine.
_ACCELERATE_DEEPSPEED = re.compile(r"^\s*distributed_type\s*:\s*['\"]?DEEPSPEED\b")
_ACCELERATE_CONFIG = re.compile(r"^\s*(?:compute_environment|num_processes|deepspeed_config|mixed_precision)\s*:", re.M)
#: A config value that runs `nvidia-smi` through an OmegaConf/Hydra interpolation (`${eval:"..."}`);
#: a CI workflow's `run: nvidia-smi` is a step on a GPU runner, not the code's configuration.
_NVIDIA_SMI = re.compile(r"\$\{[^\n]*\bnvidia-smi\b")


class ConfigCudaOnlyTarget(TextRule):
    """A config builds a CUDA-only class, runs `nvidia-smi` or launches DeepSpeed.

    What:
    Reports Hydra's `_target_: apex.optimizers.FusedAdam` (any class of a CUDA-only
    package: apex, flash_attn, xformers, bitsandbytes, ...), a config value that
    runs `nvidia-smi` through an interpolation (a resolver such as
    `${eval:"...check_output('nvidia-smi ...')"}`), and an accelerate config whose
    `distributed_type: DEEPSPEED` makes `accelerate launch` start DeepSpeed's engine
    (EasyContext's `accelerate_configs/*.yaml`, blind round 17).

    Why:
    Hydra imports the target when it instantiates the config, and the package does not
    install without CUDA; `nvidia-smi` does not exist on a Mac or a CPU machine. Both fail
    before training starts, and nothing in the Python code names them.

    Fix safety:
    Not rewritten: the config is also how the code runs on the cluster. Override the
    value on a Mac (`optimizer._target_=torch.optim.AdamW`, `train.gpu_mem=16`), or add
    a config for it.

    Known limits:
    Only targets spelled out in the config are read; one built by interpolation
    (`_target_: ${model.cls}`) is not.
    """

    code = "PT705"
    name = "config-cuda-only-target"
    safety = Safety.REVIEW
    patterns = CONFIG_PATTERNS
    words = frozenset()

    valid = [
        Example("optimizer:\n  _target_: torch.optim.AdamW\n  lr: 0.001\n", path="configs/optimizer/adamw.yaml"),
        Example("# _target_: apex.optimizers.FusedAdam\n", path="optim.yaml"),
        Example("loss_fn:\n  _target_: src.losses.cross_entropy.CrossEntropyLoss\n", path="loss.yaml"),
        # a CI step on a GPU runner, not the code's configuration
        Example("jobs:\n  test:\n    runs-on: [self-hosted, gpu]\n    steps:\n      - run: nvidia-smi\n",
                path=".github/workflows/gpu_tests.yaml"),
    ]
    invalid = [
        Example(dedent("""\
            # @package _global_
            optimizer:
              _target_: apex.optimizers.FusedAdam
              adam_w_mode: true
            """), path="configs/experiment/based-360m.yaml", line=3, message="apex"),
        Example(dedent("""\
            train:
              gpu_mem: ${eval:"round(float(__import__('subprocess').check_output('nvidia-smi -i 0 --query-gpu=memory.total --format=csv,noheader,nounits', shell=True).strip().decode()) / 1000)"}
            """), path="configs/experiment/pile/base.yaml", line=2, message="nvidia-smi"),
        Example('{"loss": {"_target_": "flash_attn.losses.cross_entropy.CrossEntropyLoss"}}\n', path="cfg.json"),
        Example(dedent("""\
            compute_environment: LOCAL_MACHINE
            deepspeed_config:
              deepspeed_config_file: accelerate_configs/zero3_offload.json
              zero3_init_flag: false
            distributed_type: DEEPSPEED
            num_processes: 8
            """), path="accelerate_configs/single_node.yaml", line=5, message="DeepSpeed's engine"),
    ]

    def check(self, text: str) -> str:
        accelerate = _ACCELERATE_CONFIG.search(text) is not None
        for number, line in _lines(text):
            code = _uncommented(line)
            if accelerate and _ACCELERATE_DEEPSPEED.match(code):
                self.flag(number, "`accelerate launch` with this config starts DeepSpeed's engine, which has no MPS "
                          "support (porter's requirements leave DeepSpeed out on macOS); on a CPU-only machine it "
                          "runs only where DeepSpeed installs and builds its CPU ops", column=code.index("DEEPSPEED") + 1,
                          before=line, suggestion="on a Mac, launch with a config of your own: `distributed_type: "
                                                  "MULTI_CPU` (or `NO` for one process) and a torch.optim optimizer")
            for match in _HYDRA_TARGET.finditer(code):
                target = match.group("target")
                if is_cuda_only_module(target):
                    self.flag(number, f"the config builds {target}, from a package that needs CUDA; Hydra imports it "
                              "when it instantiates the config", column=match.start() + 1, before=line,
                              suggestion="override the target on a Mac (for an optimizer: torch.optim.AdamW)")
            found = _NVIDIA_SMI.search(code)
            if found:
                self.flag(number, "the config runs nvidia-smi, which does not exist without an NVIDIA GPU",
                          column=code.index("nvidia-smi", found.start()) + 1, before=line, suggestion="override the value on a Mac")
        return text


_LAUNCH = re.compile(
    r"(?P<cmd>torchrun|torch\.distributed\.(?:launch|run)|accelerate\s+launch|deepspeed)\b.*?"
    r"(?:--nproc[_-]per[_-]node|--num[_-]processes|--num[_-]gpus)[= ](?P<n>\S+)"
)
_VISIBLE = re.compile(r"\bCUDA_VISIBLE_DEVICES=(?P<value>\S*)")


class ShellMultiGpuLaunch(TextRule):
    """A shell script launches one process per GPU.

    What:
    Reports `torchrun --nproc_per_node=N`, `python -m torch.distributed.launch
    --nproc_per_node N`, `accelerate launch --num_processes N` and `deepspeed
    --num_gpus N` in shell scripts.

    Why:
    A Mac has one MPS device, and MPS tensors can't go through Gloo collectives
    (`ProcessGroupGloo::allgather: invalid tensor type`). N processes on one device
    either fail or train N copies on the same GPU.

    Fix safety:
    Not rewritten: the script is also how the code runs on the cluster. Run with
    `--nproc_per_node=1` on a Mac (porter_runtime picks gloo and `device_ids=None`
    there), or keep a separate launch line for it.

    A count the caller gives (`--nproc_per_node=${2:-4}`, `"${GPUS}"`) is a note
    (severity "info"): the one who runs the script picks it.

    Known limits:
    Launches spelled through variables (`$LAUNCHER $ARGS`) are not recognised.
    """

    code = "PT702"
    name = "shell-multi-gpu-launch"
    safety = Safety.REVIEW
    patterns = SHELL_PATTERNS
    words = frozenset()

    valid = [
        Example("python train.py --steps 10\n", path="run.sh"),
        Example("torchrun --nproc_per_node=1 train.py\n", path="run.sh"),
        Example("# torchrun --nproc_per_node=8 train.py\n", path="run.sh"),
    ]
    invalid = [
        Example("#!/bin/bash\ntorchrun --nproc_per_node=8 pretrain.py --config cfg.yaml\n", path="run.sh"),
        Example("python -m torch.distributed.launch --nproc_per_node $NGPU train.py\n", path="launch.sh",
                message="the count is the caller's: for information"),
        Example(dedent("""\
            #!/bin/bash
            # Usage: ./run_example.sh example.py 4
            torchrun --nnodes=1 --nproc_per_node=${2:-4} --rdzv_id=101 --rdzv_endpoint="localhost:5972" ${1:-example.py}
            """), path="run_example.sh", line=3, message="for information"),
        Example("accelerate launch --num_processes=4 train.py\n", path="train.sh"),
    ]

    def check(self, text: str) -> str:
        for number, line in _lines(text):
            match = _LAUNCH.search(_uncommented(line))
            if match and match.group("n") != "1":
                users = match.group("n").strip("\"'").startswith("$")  # the user's count: their decision
                self.flag(number, f"{match.group('cmd')} starts {match.group('n')} processes, one per GPU; "
                          "a Mac has one MPS device" + (" (the count is the caller's: for information)"
                                                        if users else ""),
                          column=match.start() + 1, before=line, suggestion="use --nproc_per_node=1 on a Mac",
                          severity=INFO if users else "")
        return text


class ShellCudaVisibleDevices(TextRule):
    """A shell script selects GPUs with `CUDA_VISIBLE_DEVICES`.

    What:
    Reports `CUDA_VISIBLE_DEVICES=...` assignments and exports in shell scripts.

    Why:
    The variable has no effect on MPS or CPU: the script silently runs on whatever
    device is there, which may not be what the user meant.

    Fix safety:
    Not rewritten: the variable is right on the cluster and harmless elsewhere. To pin
    the device of a ported script, set `PORTER_DEVICE` (`cpu`, `mps`, `cuda:1`).

    A value that picks GPUs (`0,1`) is a note (severity "info"): ignored off CUDA, it
    blocks nothing. One that hides them all to force the CPU (`=`, `=-1`) is a finding:
    off CUDA the port then uses MPS.

    Known limits:
    Reports every assignment, including harmless ones.
    """

    code = "PT703"
    name = "shell-cuda-visible-devices"
    safety = Safety.REVIEW
    patterns = SHELL_PATTERNS
    words = frozenset({"CUDA_VISIBLE_DEVICES"})

    valid = [
        Example("PORTER_DEVICE=cpu python train.py\n", path="run.sh"),
        Example("# CUDA_VISIBLE_DEVICES=0 python train.py\n", path="run.sh"),
    ]
    invalid = [
        Example("CUDA_VISIBLE_DEVICES=0,1 python train.py\n", path="run.sh", message="for information"),
        Example("export CUDA_VISIBLE_DEVICES=3\npython eval.py\n", path="eval.sh"),
        Example("CUDA_VISIBLE_DEVICES= python eval.py --cpu\n", path="eval.sh", message="to force the CPU"),
    ]

    def check(self, text: str) -> str:
        for number, line in _lines(text):
            match = _VISIBLE.search(_uncommented(line))
            if match:
                hides = hides_gpus(match.group("value"))
                self.flag(number, f"CUDA_VISIBLE_DEVICES={match.group('value')} has no effect on MPS or CPU"
                          + ("; it hides the GPUs to force the CPU, and a Mac's port would use MPS" if hides
                             else " (it picks GPUs: for information)"),
                          column=match.start() + 1, before=line,
                          suggestion="set PORTER_DEVICE (cpu, mps, cuda:N) to pin the device of the port",
                          severity="" if hides else INFO)
        return text


_HF_FLAGS = re.compile(
    r"(?P<flag>--tf32)[= ]+(?P<tf32>True|true|1)\b"
    r"|(?P<ds>--deepspeed)(?:[= ]+(?P<config>[^\s\\-]\S*))?"
    r"|(?P<optim>--optim)[= ]+(?P<name>paged_\S+|\S*8bit\S*|\S*bnb\S*)"
    r"|^\s*(?:\w+=\S*\s+)*(?P<launcher>deepspeed)\s"
)
_HF_ADVICE = {
    "flag": ("--tf32 True stops TrainingArguments without an Ampere CUDA GPU",
             "drop --tf32 on a Mac (keep it in the cluster's launch line)"),
    "ds": ("--deepspeed needs DeepSpeed's engine, which runs on CUDA GPUs (no MPS support; accelerate's "
            "DeepSpeed path fails on the CPU)",
           "drop --deepspeed on a Mac: Trainer then trains without it"),
    "optim": ("this --optim is a bitsandbytes optimizer (CUDA kernels)",
              "--optim adamw_torch on a Mac (same AdamW update, 32-bit state)"),
    "launcher": ("the deepspeed launcher starts DeepSpeed's engine, one process per GPU: it has no MPS support, "
                 "and accelerate's DeepSpeed path fails on the CPU",
                 "launch with python (or torchrun --nproc_per_node=1) on a Mac"),
}


class ShellHfCudaOptions(TextRule):
    """A launch script passes Trainer options that need CUDA (`--tf32 True`, `--deepspeed`).

    What:
    Reports, in shell scripts, the Hugging Face Trainer command-line options that
    only work with CUDA: `--tf32 True`, `--deepspeed ds_config.json`, bitsandbytes
    optimizers (`--optim paged_adamw_32bit`, `--optim adamw_bnb_8bit`), and commands
    started by the `deepspeed` launcher.

    Why:
    `HfArgumentParser` turns them into `TrainingArguments`, which stops without an
    Ampere GPU for tf32, or fails importing DeepSpeed / bitsandbytes.

    Fix safety:
    Not rewritten: the script is also how the code runs on the cluster. Keep a launch
    line for a Mac without these options (`--optim adamw_torch` for a paged AdamW).

    Where the repository derives its own class from `TrainingArguments` (or TRL's
    `SFTConfig`...), or its `HfArgumentParser` fills transformers' own, TP708 (TP709)
    makes that class call `porter_runtime.training_arguments`,
    which unsets `tf32` and `deepspeed` and swaps a bitsandbytes optimizer for
    `adamw_torch` off CUDA: those options are then notes (for information). The
    `deepspeed` launcher stays a finding.

    In a repository none of whose modules names Trainer's arguments (`TrainingArguments`,
    `HfArgumentParser`, TRL's configs), the options are the script's own (Baichuan-7B's
    `--deepspeed --deepspeed_config` for DeepSpeed's engine): only the launcher is reported.

    Known limits:
    Options built in variables (`$DS_ARGS`) are not seen. Whether the script's Python
    entry point uses the repository's class is not checked.
    """

    code = "TP706"
    name = "shell-hf-cuda-options"
    safety = Safety.REVIEW
    patterns = SHELL_PATTERNS
    words = frozenset()

    valid = [
        Example("python train.py --tf32 False --optim adamw_torch\n", path="run.sh"),
        Example("# python train.py --deepspeed ds.json\n", path="run.sh"),
    ]
    invalid = [
        Example("#!/bin/bash\npython finetune.py \\\n    --bf16 True \\\n    --tf32 True \\\n"
                "    --optim paged_adamw_32bit\n", path="finetune.sh"),
        Example("deepspeed --num_gpus 1 train.py --deepspeed configs/zero2.json\n", path="run.sh"),
        Example(  # Baichuan-7B: train.py drives DeepSpeed's engine itself; only the launcher is reported
            "deepspeed --hostfile config/hostfile \\\n    train.py \\\n    --deepspeed \\\n"
            "    --deepspeed_config config/deepspeed.json\n",
            path="scripts/train.sh", line=1, message="the deepspeed launcher",
            project=(("train.py", "import deepspeed\nimport argparse\n\nparser = argparse.ArgumentParser()\n"
                      "parser = deepspeed.add_config_arguments(parser)\n"),),
        ),
    ]

    def check(self, text: str) -> str:
        hooked = bool(getattr(self.project, "trainer_arguments_class", False))
        trainer = self.project is None or getattr(self.project, "trainer_options", True)
        for number, line in _lines(text):
            for match in _HF_FLAGS.finditer(_uncommented(line)):
                kind = next(k for k in ("flag", "ds", "optim", "launcher") if match.group(k))
                if not trainer and kind != "launcher":
                    continue  # no module parses Trainer's arguments: the script's own option
                message, suggestion = _HF_ADVICE[kind]
                if hooked and kind != "launcher":
                    self.flag(number, f"{message} (for information: the TrainingArguments the repository parses "
                              "calls porter_runtime.training_arguments, which drops it off CUDA)",
                              column=match.start(kind) + 1, before=line, suggestion=suggestion, severity=INFO)
                    continue
                self.flag(number, message, column=match.start(kind) + 1, before=line, suggestion=suggestion)
        return text
