"""A device option the repository's own commands give ``"cuda"`` parses through the runtime (PT007)."""

from __future__ import annotations

from textwrap import dedent

import libcst as cst

from porter.rulebase.rule import Example, Needs, Rule, Safety, keyword, positional, string_value
from porter.rulebase.syntax import EQ


class DeviceOptionType(Rule):
    """A device option that the repository's commands give `"cuda"` gets `type=porter_runtime.device_option`.

    What:
    Where the repository's own commands (a README, a shell script, a notebook's
    `!python` line, a Makefile, a usage line in a module) pass a CUDA device to an option whose name holds
    "device" (`python demo.py --device "cuda"`, `--eval_device=cuda:0`), each
    `parser.add_argument("--device", ...)` of that option gets
    `type=porter_runtime.device_option` (in place of `type=str`). An option with
    `choices=`, an `action=` or `nargs=` (I-JEPA's `--devices cuda:0 cuda:1` is a list of
    GPUs, one process each, whose default argparse never converts), or with a `type` of
    its own, is left as it is.

    Why:
    A default of `"cpu"` (or one porter already ported, PT005) does not help when the
    README's command says `--device "cuda"`: the string reaches `model.to(args.device)`
    and fails without CUDA, in a script with nothing else CUDA-like to port
    (Grounded-Segment-Anything's demos).

    Fix safety:
    Safe. `device_option` returns a string that is not a CUDA device as it was given.
    A CUDA one becomes `porter_runtime.device_str(value)`, which on CUDA is that same
    string (`"cuda"`, `"cuda:1"`); elsewhere it names the resolved device (`"mps"`,
    `"cpu"`). argparse applies `type` to a string default too, which changes nothing
    for a default that is not `"cuda"`.

    Known limits:
    Only the option's name is matched, not which script the command runs; a command
    built at run time (a Python launcher's argument list) is not read. A tree read
    file by file (porter given a single file) has no commands to read.
    """

    code = "PT007"
    name = "device-option-type"
    safety = Safety.SAFE
    needs = Needs(words=frozenset({"add_argument"}))

    valid = [
        # no command of the repository gives --device a CUDA device (the examples' tree has none)
        "parser.add_argument('--device', type=str, default='cpu')\n",
        Example(  # a list of GPUs, one process each (I-JEPA's main.py)
            "parser.add_argument('--devices', type=str, nargs='+', default=['cuda:0'])\n",
            project=(("README.md", "python main.py --fname configs/in1k_vith14_ep300.yaml --devices cuda:0 cuda:1\n"),),
        ),
        Example(  # choices would refuse the resolved device's name
            "parser.add_argument('--device', default='cuda', choices=['cuda', 'cpu'])\n",
            project=(("README.md", "python train.py --device cuda\n"),),
        ),
    ]
    invalid = [
        Example(  # Grounded-SAM: README `python grounded_sam_demo.py ... --device "cuda"`
            dedent("""\
                import argparse

                parser = argparse.ArgumentParser("Grounded-Segment-Anything Demo", add_help=True)
                parser.add_argument("--box_threshold", type=float, default=0.3, help="box threshold")
                parser.add_argument("--device", type=str, default="cpu", help="running on cpu only!, default=False")
                args = parser.parse_args()
                """),
            dedent("""\
                import porter_runtime
                import argparse

                parser = argparse.ArgumentParser("Grounded-Segment-Anything Demo", add_help=True)
                parser.add_argument("--box_threshold", type=float, default=0.3, help="box threshold")
                parser.add_argument("--device", type=porter_runtime.device_option, default="cpu", help="running on cpu only!, default=False")
                args = parser.parse_args()
                """),
            project=(("README.md", 'python grounded_sam_demo.py --config cfg.py --device "cuda"\n'),),
        ),
        Example(
            "parser.add_argument('--eval-device', default='cpu')\n",
            "import porter_runtime\nparser.add_argument('--eval-device', default='cpu', type=porter_runtime.device_option)\n",
            project=(("scripts/eval.sh", "python eval.py --eval-device=cuda:0 --batch 8\n"),),
        ),
    ]

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        func = original.func
        project = self.ctx.project
        if not isinstance(func, cst.Attribute) or func.attr.value != "add_argument" or project is None:
            return updated
        given = project.cuda_device_options
        names = [string_value(a.value) for a in positional(original)]
        if not given or not any(name in given for name in names if name):
            return updated
        if any(keyword(original, k) is not None for k in ("choices", "action", "nargs")):
            return updated  # choices refuse "mps"; a list of devices (`--devices cuda:0 cuda:1`) counts processes
        kind = keyword(updated, "type")
        if kind is not None and not (isinstance(kind.value, cst.Name) and kind.value.value == "str"):
            return updated  # a type of its own (or porter's already)
        value = self.runtime("device_option")
        if kind is not None:
            args = [a.with_changes(value=value) if a is kind else a for a in updated.args]
        else:
            last = updated.args[-1] if updated.args else None
            args = list(updated.args)
            if last is not None and last.comma is cst.MaybeSentinel.DEFAULT:
                args[-1] = last.with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
            args.append(cst.Arg(value=value, keyword=cst.Name("type"), equal=EQ))
        return self.rewrite(original, updated.with_changes(args=args),
                            "a device option the repository's commands give a CUDA device now parses to the "
                            "resolved device")
