"""ring-flash-attention's commands, as test/test.sh runs them, on 2 processes:

Each test script is launched as the README's ``torchrun --nproc_per_node 8 test/<script>.py`` with 2 processes
(test.sh's ``num_gpus``; every script's sequence lengths divide by 2, and by 4 for zigzag). A script builds random
bf16 q/k/v on ``cuda:{rank}`` under ``init_process_group("nccl")``, broadcasts them from rank 0, runs flash-attn on
the whole sequence and the ring variant on this rank's shard, forward and backward, and prints the largest
differences ("out diff", "lse diff", "dq/dk/dv diff"); it asserts nothing. The scripts have no flags (their only
argument is ``compile``), so they run at their own sizes (sequences of 3816 to 4240 tokens, 5 heads).

- ``llama3-varlen``, ``llama3-prepare-cu-seqlens``, ``ring-func``, ``ring-varlen``, ``stripe-func``,
  ``zigzag-func``, ``zigzag-varlen``: test.sh's first loop, in its order.
- ``triton-kernels``: test.sh's ``torchrun ... test/test_triton_kernels.py`` (the Triton LSE flatten/unflatten
  kernels of triton_utils.py against utils.py's PyTorch versions).

The tests assert nothing, so each attention step also reads what the script printed (``_gauntlet/check_diffs.py``,
written by prepare()): it fails when a printed difference is not finite, when none was printed, or when a
difference's largest value is over a tenth of the reference's (the flash-attn output, LSE or gradients the script
prints beside it). bf16 rounding leaves differences of about 1% on CUDA; a wrong causal mask, a lost block or a
wrong LSE layout leaves differences of the reference's own size.

Left out: test.sh's second loop (every test again with ``compile``: inductor compilation on top of steps that take
two minutes each on a loaded CPU); benchmark/benchmark_kvpacked_func.py and benchmark_varlen_kvpacked_func.py (Llama-3-8B shapes fixed in
the code: 8192 tokens, 32 heads of 128, 100 forward+backward iterations twice per function, no flags); the
README's Hugging Face adapter example (a snippet in the README, not a file of the repository, that downloads
Qwen3-0.6B). ``pip install .`` is replaced by ``PYTHONPATH={tree}``.
"""

from pathlib import Path

from _recipe import Step

G = "_gauntlet"
ENV = {"PYTHONPATH": "{tree}"}
# torchrun with a random port: other recipes may run a torchrun beside this one
TORCHRUN = "torchrun --nproc_per_node 2 --master_port=$((20000 + RANDOM % 20000))"

CHECK_DIFFS = r'''
"""Reads a ring-flash-attention test's printed differences; exit 1 when one is too large or none was printed."""
import math
import re
import sys

text = open(sys.argv[1]).read().splitlines()
prefix = re.compile(r"^\[(?:rank|default)\d+\]:\s?")
values, current = {}, None
for line in (prefix.sub("", raw).strip() for raw in text):
    one = re.match(r"^(.+?): max (\S+), mean (\S+)$", line)  # rank0_only: "out: max X, mean Y"
    per_rank = re.match(r"^\[\d+\] max (\S+), mean (\S+)$", line)  # after a "name:" line
    if one:
        values.setdefault(one.group(1), []).append(float(one.group(2)))
    elif line.endswith(":") and not line.startswith("#"):
        current = line[:-1]
    elif per_rank and current:
        values.setdefault(current, []).append(float(per_rank.group(1)))

REFERENCE = {"out diff": ("out",), "lse diff": ("lse",),
             **{f"d{x} diff": ("local_dqkv", "local_dq") for x in "qkv"}}
problems, checked = [], 0
for name, reference_names in REFERENCE.items():
    if name not in values:
        continue
    reference = next((values[r] for r in reference_names if r in values), None)
    worst = max(values[name], key=lambda v: (not math.isfinite(v), v))
    if not math.isfinite(worst) or reference is None or not all(map(math.isfinite, reference)):
        problems.append(f"{name}: {worst} (reference {reference})")
        continue
    checked += 1
    if worst > 0.1 * max(reference):
        problems.append(f"{name}: max {worst:.3g} > a tenth of the reference's max {max(reference):.3g}")
if not checked:
    problems.append("no difference was printed")
for problem in problems:
    print("check_diffs:", problem)
print(f"check_diffs: {checked} differences read, {len(problems)} problems")
sys.exit(1 if problems else 0)
'''


def prepare(tree: Path) -> None:
    root = Path(tree) / G
    (root / "logs").mkdir(parents=True, exist_ok=True)
    (root / "check_diffs.py").write_text(CHECK_DIFFS)


def attention_test(name: str, script: str) -> Step:
    log = f"{G}/logs/{name}.log"
    return Step(name, f"set -o pipefail; {TORCHRUN} test/{script} 2>&1 | tee {log} && python {G}/check_diffs.py {log}",
                outputs=[log], timeout=600, env=ENV)


STEPS = [
    attention_test("llama3-varlen", "test_llama3_flash_attn_varlen_func.py"),
    Step("llama3-prepare-cu-seqlens", f"{TORCHRUN} test/test_llama3_prepare_cu_seqlens.py", timeout=300, env=ENV),
    attention_test("ring-func", "test_ring_flash_attn_func.py"),
    attention_test("ring-varlen", "test_ring_flash_attn_varlen_func.py"),
    attention_test("stripe-func", "test_stripe_flash_attn_func.py"),
    attention_test("zigzag-func", "test_zigzag_ring_flash_attn_func.py"),
    attention_test("zigzag-varlen", "test_zigzag_ring_flash_attn_varlen_func.py"),
    Step("triton-kernels", f"{TORCHRUN} test/test_triton_kernels.py", timeout=300, env=ENV),
]
