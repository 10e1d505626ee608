"""attention-gym: the README's example script (document mask visualiser, CPU by default), the MLA RoPE
score_mod visualiser (cuda by default), examples/mla.py's accuracy mode (DeepSeek-V2 MLA: vanilla decode vs the
absorbed-weights decode, in plain torch and with FlexAttention) at batch 1 and a 32-token KV cache,
benchmarks/flex_perf.py with a config file (one causal shape, float32, SDPA math), the paged-attention latency
benchmark's own benchmark() at a tiny size, and the CI's pytest of test/test_mods.py."""

from pathlib import Path

from _recipe import Step

G = "_gauntlet"
ENV = {"PYTHONPATH": "{tree}", "MPLBACKEND": "Agg"}

# benchmarks/flex_perf.py's own config format (benchmarks/configs/config_basic.yaml), scaled down.
FLEX_PERF = """\
dynamic: false
calculate_bwd: false
dtype: "float32"
b: [1]
nh: ["2,2"]
s: [128]
d: [16]
mods: ["causal"]
backend: ["math"]
max_autotune: false
decoding: false
kv_size: null
throughput: true
show_speedups: false
save_path: "_gauntlet/flex_perf.csv"
"""

# attn_gym/paged_attention/latency.py: its __main__ sweeps bsz 32..128 over 2k..32k tokens; its own
# benchmark(attn_type, page_size, bsz, max_seq_len, n_heads, head_dim) at a tiny size (bsz a multiple of 4,
# as random_init_paged_attention needs), the script's default page size.
PAGED = ("cd attn_gym/paged_attention && python -c \"from latency import benchmark; "
         "benchmark('causal', 128, 4, 256, 2, 16); open('../../_gauntlet/paged.ok', 'w').write('ok')\"")


def prepare(tree: Path) -> None:
    work = tree / G
    work.mkdir(parents=True, exist_ok=True)
    (work / "flex_perf.yaml").write_text(FLEX_PERF)


STEPS = [
    Step("document_mask", "python attn_gym/masks/document_mask.py",
         outputs=["document_causal_mask.png"], timeout=200, env=ENV),
    Step("latent_attention", "python attn_gym/mods/latent_attention.py",
         outputs=["mla_rope_score_mod.png"], timeout=200, env=ENV),
    Step("mla_acc", "python examples/mla.py --batch_size 1 --kv_length 32 --mode acc", timeout=300, env=ENV),
    Step("flex_perf", "python benchmarks/flex_perf.py --config _gauntlet/flex_perf.yaml",
         outputs=["_gauntlet/flex_perf.csv"], timeout=300, env=ENV),
    Step("paged_latency", PAGED, outputs=["_gauntlet/paged.ok"], timeout=300, env=ENV),
    Step("test_mods", "python -m pytest -x -q test/test_mods.py", timeout=300, env=ENV),
]
