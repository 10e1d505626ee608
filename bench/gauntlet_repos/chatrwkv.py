"""BlinkDL/ChatRWKV: the README's scripts on tiny random RWKV weights, with the repository's own tokenizers.

- ``chat``: ``python chat.py`` (v1 chat, src/model_run.py, RWKV-4 weights, 20B_tokenizer.json) fed a scripted
  conversation on stdin (a chat message, ``+gen``, ``+++``, ``+qa``, ``+reset``).
- ``v2-chat``: ``python v2/chat.py`` (the rwkv package's RWKV class, strategy 'cuda fp16', RWKV-4 weights,
  v2/20B_tokenizer.json, prompt/default/English-2.py) fed a scripted conversation (chat, ``+gen``, ``+qa``, ``+i``).
- ``api-demo``: ``python API_DEMO.py`` then ``python API_DEMO_WORLD.py`` (rwkv package, RWKV_V7_ON=1: RWKV_x070,
  strategy 'cuda fp16', rwkv_vocab_v20230424): logits, state round trip, PIPELINE.generate, Q&A and CFG decoding.
- ``api-demo-chat``: ``python API_DEMO_CHAT.py`` (RWKV-7 chat loop) fed two scripted messages.
- ``demos-v5-v6``: ``python RWKV_v5_demo.py`` and ``python RWKV_v6_demo.py`` (self-contained RNNs and tokenizer).

Not CUDA matters, handled the same on the original and the port:
- The demos import ``rwkv`` (``pip install rwkv``): the steps put the repository's own copy of that package,
  rwkv_pip_package/src, on PYTHONPATH (what API_DEMO.py's commented-out ``sys.path.append`` does), so the port's
  copy is the one that runs.
- Model paths: API_DEMO*.py name ``E://RWKV-Runner//models//NAME``, which on Linux is the relative path
  ``E:/RWKV-Runner/models/NAME``: prepare() writes the tiny weights there. chat.py, v2/chat.py and the v5/v6 demos
  name absolute paths (/fsx/..., /mnt/e/...) and the v5/v6 demos hard-code n_layer 24 / n_embd 1024 or 2048 for
  their 0.4B/1.6B models: each step runs a copy of the tree's script under _gauntlet/ (same lines, same line
  numbers) with only those constants replaced (``_gauntlet/derive.py``; it fails if a constant is not found
  exactly once). v2/chat.py's copy sits in _gauntlet/v2/ beside links to v2/prompt and v2/20B_tokenizer.json
  and _gauntlet/rwkv_pip_package, so its ``current_path`` lookups resolve as in v2/.
- The chat loops read prompt_toolkit's ``prompt()`` until stdin ends (EOFError): the conversation comes through a
  pipe (``cat FILE |``: prompt_toolkit ends input at once on a regular file's stdin) and ``_gauntlet/scripted.py``
  runs the script as ``__main__``, counts the lines prompt() returns and takes the EOFError raised inside
  prompt_toolkit after the last one as the end (it writes the step's marker); any other error, or fewer lines
  read, fails the step.
- Random weights are shaped as the released checkpoints (bf16, storages tagged cuda:0 as a GPU box's torch.save
  writes them), with ln_out/head set so that the double-newline token has about 2% of the probability: the
  loops that stop at '\\n\\n' end after some tens of tokens instead of running to their 999-token caps. The
  RWKV-5/6/7 heads also push the vocab's tokens that are not UTF-8 by themselves ~30 logits down (as a trained
  model never emits them): TRIE_TOKENIZER.decode gives one '\\ufffd' for a list holding one, and
  API_DEMO_CHAT.py's loop (99999 tokens) would never see '\\n\\n' again (added after first contact).
"""

from pathlib import Path

from _recipe import Step, save_cuda_checkpoint

G = "_gauntlet"
ENV = {"PYTHONPATH": "{tree}/rwkv_pip_package/src:{tree}", "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}

V7_WORLD = "E:/RWKV-Runner/models/RWKV-x070-World-1.5B-v3-20250127-ctx4096"   # API_DEMO.py, API_DEMO_WORLD.py
V7_G1 = "E:/RWKV-Runner/models/rwkv7-g1b-1.5b-20251202-ctx8192"             # API_DEMO_CHAT.py

DERIVE = r'''
"""Copy a script of the tree under _gauntlet/ with only its model paths and model sizes replaced (same lines)."""
import sys
from pathlib import Path

TABLE = {
    "chat": ("chat.py", "_gauntlet/chat.py", [
        ("'/fsx/BlinkDL/HF-MODEL/rwkv-4-pile-14b/RWKV-4-Pile-14B-20230228-ctx4096-test663'",
         "'_gauntlet/models/RWKV-4-Pile-tiny'"),
    ]),
    "v2-chat": ("v2/chat.py", "_gauntlet/v2/chat.py", [
        ("'/fsx/BlinkDL/HF-MODEL/rwkv-4-raven/RWKV-4-Raven-14B-v12-Eng98%-Other2%-20230523-ctx8192'",
         "'_gauntlet/models/RWKV-4-Raven-tiny'"),
    ]),
    "v5": ("RWKV_v5_demo.py", "_gauntlet/RWKV_v5_demo.py", [
        ('"/fsx/BlinkDL/CODE/_PUBLIC_/ChatRWKV/tokenizer/rwkv_vocab_v20230424.txt"',
         '"tokenizer/rwkv_vocab_v20230424.txt"'),
        ("'/fsx/BlinkDL/HF-MODEL/temp/RWKV-5-World-0B4-v2-OnlyForTest_71%_trained-20231104-ctx4096'",
         "'_gauntlet/models/RWKV-5-World-tiny'"),
        ("args.n_layer = 24", "args.n_layer = 2"),
        ("args.n_embd = 1024", "args.n_embd = 64"),
    ]),
    "v6": ("RWKV_v6_demo.py", "_gauntlet/RWKV_v6_demo.py", [
        ("'/mnt/e/RWKV-Runner/models/rwkv-final-v6-1b5'", "'_gauntlet/models/RWKV-6-World-tiny'"),
        ("args.n_layer = 24", "args.n_layer = 2"),
        ("args.n_embd = 2048", "args.n_embd = 64"),
    ]),
}

source, target, subs = TABLE[sys.argv[1]]
text = Path(source).read_text(encoding="utf-8")
for old, new in subs:
    if text.count(old) != 1:
        sys.exit(f"derive.py: {old!r} occurs {text.count(old)} times in {source}, expected once")
    text = text.replace(old, new)
Path(target).parent.mkdir(parents=True, exist_ok=True)
Path(target).write_text(text, encoding="utf-8")
print(f"[gauntlet] {source} -> {target}")
'''

SCRIPTED = r'''
"""Run a chat script as __main__ on a scripted stdin (a pipe: prompt_toolkit takes a regular file's stdin for an
immediate end of input). Every line must come back from prompt_toolkit's prompt(); the EOFError it raises after the
last one ends the conversation and writes the marker. Any other error, or an early end, fails the step."""
import os
import runpy
import sys
import traceback

import prompt_toolkit

script, marker, expected = sys.argv[1], sys.argv[2], int(sys.argv[3])
answered = []
_prompt = prompt_toolkit.prompt


def counting_prompt(*args, **kwargs):
    line = _prompt(*args, **kwargs)
    answered.append(line)
    return line


prompt_toolkit.prompt = counting_prompt
sys.argv = [script]
sys.path[0] = os.path.dirname(os.path.abspath(script))
sys.path.insert(1, os.getcwd())
try:
    runpy.run_path(script, run_name="__main__")
except EOFError:
    frames = traceback.extract_tb(sys.exc_info()[2])
    if not any("prompt_toolkit" in frame.filename for frame in frames):
        raise
    print(f"\n[gauntlet] end of the scripted conversation: {len(answered)} of {expected} lines read", flush=True)
    if len(answered) != expected:
        sys.exit(f"scripted.py: read {len(answered)} lines, expected {expected}")
    with open(marker, "w") as out:
        out.write("done\n")
    sys.exit(0)
sys.exit("scripted.py: the script returned before reading all of its input")
'''

CHAT_INPUT = "Hello Alice, how are you?\n+gen Once upon a time\n+++\n+qa What is the capital of France?\n+reset\n"
V2_CHAT_INPUT = "Hello Alice, how are you?\n+gen Once upon a time\n+qa What is the capital of France?\n+i Write a haiku\n"
API_CHAT_INPUT = "hi\nWhat is RWKV?\n"


def _gen(seed):
    import torch

    g = torch.Generator().manual_seed(seed)

    def randn(*shape, scale=1.0, shift=0.0):
        return torch.randn(*shape, generator=g) * scale + shift

    def rand(*shape):
        return torch.rand(*shape, generator=g)

    return randn, rand


def _head(randn, w, vocab, C, stop_token, logit=7.0, banned=()):
    """ln_out and head: near-uniform logits, the stop token (double newline) about `logit` above the rest and
    the ``banned`` tokens about 30 below (as a trained model, which does not emit them)."""
    import torch

    bias = torch.sign(randn(C))
    w["ln_out.weight"] = torch.full((C,), 0.1)
    w["ln_out.bias"] = bias
    head = randn(vocab, C, scale=0.02)
    head[stop_token] = logit * bias / bias.dot(bias)
    for token in banned:
        head[token] = -30.0 * bias / bias.dot(bias)
    w["head.weight"] = head


def _bad_utf8_tokens(vocab_file):
    """Ids of rwkv_vocab_v20230424 tokens that are not valid UTF-8 by themselves (lone bytes >= 0x80, partial
    characters). The package's TRIE_TOKENIZER.decode returns just '\\ufffd' for a list holding one, so a chat loop
    that waits for '\\n\\n' in the decoded reply (API_DEMO_CHAT.py: up to 99999 tokens) never ends once a
    random model samples one; a trained model does not."""
    import ast

    bad = []
    for line in Path(vocab_file).read_text(encoding="utf-8").splitlines():
        idx = int(line[:line.index(" ")])
        token = ast.literal_eval(line[line.index(" "):line.rindex(" ")].strip())
        if isinstance(token, bytes):
            try:
                token.decode("utf-8")
            except UnicodeDecodeError:
                bad.append(idx)
    return bad


def _common(randn, w, vocab, C, n_layer):
    import torch

    w["emb.weight"] = randn(vocab, C, scale=0.5)
    w["blocks.0.ln0.weight"] = torch.ones(C)
    w["blocks.0.ln0.bias"] = torch.zeros(C)
    for i in range(n_layer):
        for ln in ("ln1", "ln2"):
            w[f"blocks.{i}.{ln}.weight"] = torch.ones(C)
            w[f"blocks.{i}.{ln}.bias"] = torch.zeros(C)


def _save(w, path):
    import torch

    save_cuda_checkpoint({k: v.to(torch.bfloat16).contiguous() for k, v in w.items()}, path)


def rwkv4(path, vocab=50277, C=64, n_layer=2, stop_token=535, seed=4):
    randn, rand = _gen(seed)
    w = {}
    _common(randn, w, vocab, C, n_layer)
    F = 4 * C
    for i in range(n_layer):
        a, f = f"blocks.{i}.att.", f"blocks.{i}.ffn."
        for k in ("time_mix_k", "time_mix_v", "time_mix_r"):
            w[a + k] = rand(1, 1, C)
        w[a + "time_decay"] = randn(C, scale=0.5, shift=-1.0)
        w[a + "time_first"] = randn(C, scale=0.3)
        for k in ("key", "value", "receptance", "output"):
            w[a + k + ".weight"] = randn(C, C, scale=C ** -0.5)
        w[f + "time_mix_k"] = rand(1, 1, C)
        w[f + "time_mix_r"] = rand(1, 1, C)
        w[f + "key.weight"] = randn(F, C, scale=C ** -0.5)
        w[f + "receptance.weight"] = randn(C, C, scale=C ** -0.5)
        w[f + "value.weight"] = randn(C, F, scale=F ** -0.5)
    _head(randn, w, vocab, C, stop_token)
    _save(w, path)


def rwkv5(path, banned=(), vocab=65536, C=64, H=2, n_layer=2, stop_token=261, seed=5):
    """RWKV-5.2 ("World v2") layout: time_decay and time_faaaa per head, gate, ln_x."""
    import torch

    randn, rand = _gen(seed)
    w = {}
    _common(randn, w, vocab, C, n_layer)
    S, F = C // H, int(3.5 * C)
    for i in range(n_layer):
        a, f = f"blocks.{i}.att.", f"blocks.{i}.ffn."
        for k in ("time_mix_k", "time_mix_v", "time_mix_r", "time_mix_g"):
            w[a + k] = rand(1, 1, C)
        w[a + "time_decay"] = randn(H, S, scale=0.5, shift=-1.0)
        w[a + "time_faaaa"] = randn(H, S, scale=0.3)
        for k in ("receptance", "key", "value", "gate", "output"):
            w[a + k + ".weight"] = randn(C, C, scale=C ** -0.5)
        w[a + "ln_x.weight"] = torch.ones(C)
        w[a + "ln_x.bias"] = torch.zeros(C)
        w[f + "time_mix_k"] = rand(1, 1, C)
        w[f + "time_mix_r"] = rand(1, 1, C)
        w[f + "key.weight"] = randn(F, C, scale=C ** -0.5)
        w[f + "receptance.weight"] = randn(C, C, scale=C ** -0.5)
        w[f + "value.weight"] = randn(C, F, scale=F ** -0.5)
    _head(randn, w, vocab, C, stop_token, banned=banned)
    _save(w, path)


def rwkv6(path, banned=(), vocab=65536, C=64, H=2, n_layer=2, stop_token=261, seed=6):
    """RWKV-6 ("Finch") layout: time_maa_* with their LoRA (w1: C x 5*32, w2: 5 x 32 x C), decay LoRA."""
    import torch

    randn, rand = _gen(seed)
    w = {}
    _common(randn, w, vocab, C, n_layer)
    S, F, D_MIX, D_DECAY = C // H, int(3.5 * C), 32, 64
    for i in range(n_layer):
        a, f = f"blocks.{i}.att.", f"blocks.{i}.ffn."
        for k in ("time_maa_x", "time_maa_w", "time_maa_k", "time_maa_v", "time_maa_r", "time_maa_g"):
            w[a + k] = rand(1, 1, C)
        w[a + "time_maa_w1"] = randn(C, 5 * D_MIX, scale=0.01)
        w[a + "time_maa_w2"] = randn(5, D_MIX, C, scale=0.01)
        w[a + "time_decay"] = randn(1, 1, C, scale=0.5, shift=-1.0)
        w[a + "time_decay_w1"] = randn(C, D_DECAY, scale=0.01)
        w[a + "time_decay_w2"] = randn(D_DECAY, C, scale=0.01)
        w[a + "time_faaaa"] = randn(H, S, scale=0.3)
        for k in ("receptance", "key", "value", "gate", "output"):
            w[a + k + ".weight"] = randn(C, C, scale=C ** -0.5)
        w[a + "ln_x.weight"] = torch.ones(C)
        w[a + "ln_x.bias"] = torch.zeros(C)
        w[f + "time_maa_k"] = rand(1, 1, C)
        w[f + "time_maa_r"] = rand(1, 1, C)
        w[f + "key.weight"] = randn(F, C, scale=C ** -0.5)
        w[f + "receptance.weight"] = randn(C, C, scale=C ** -0.5)
        w[f + "value.weight"] = randn(C, F, scale=F ** -0.5)
    _head(randn, w, vocab, C, stop_token, banned=banned)
    _save(w, path)


def rwkv7(path, banned=(), vocab=65536, C=64, n_layer=2, stop_token=261, seed=7):
    """RWKV-7 ("Goose") layout; the package's RWKV_x070 fixes HEAD_SIZE = 64 (here one head)."""
    import torch

    randn, rand = _gen(seed)
    w = {}
    _common(randn, w, vocab, C, n_layer)
    N = 64
    H = C // N
    F, D_DECAY, D_AAA, D_MV, D_GATE = 4 * C, 16, 16, 16, 32
    for i in range(n_layer):
        a, f = f"blocks.{i}.att.", f"blocks.{i}.ffn."
        for k in ("x_r", "x_w", "x_k", "x_v", "x_a", "x_g"):
            w[a + k] = rand(1, 1, C)
        w[a + "w0"] = randn(1, 1, C, scale=0.5, shift=-1.0)
        w[a + "w1"] = randn(C, D_DECAY, scale=0.1)
        w[a + "w2"] = randn(D_DECAY, C, scale=0.1)
        w[a + "a0"] = randn(1, 1, C, scale=0.1)
        w[a + "a1"] = randn(C, D_AAA, scale=0.1)
        w[a + "a2"] = randn(D_AAA, C, scale=0.1)
        w[a + "v0"] = randn(1, 1, C, scale=0.1, shift=1.0)
        w[a + "v1"] = randn(C, D_MV, scale=0.1)
        w[a + "v2"] = randn(D_MV, C, scale=0.1)
        w[a + "g1"] = randn(C, D_GATE, scale=0.1)
        w[a + "g2"] = randn(D_GATE, C, scale=0.1)
        w[a + "k_k"] = torch.full((1, 1, C), 0.85)
        w[a + "k_a"] = torch.ones(1, 1, C)
        w[a + "r_k"] = randn(H, N, scale=0.1)
        for k in ("receptance", "key", "value", "output"):
            w[a + k + ".weight"] = randn(C, C, scale=C ** -0.5)
        w[a + "ln_x.weight"] = torch.ones(C)
        w[a + "ln_x.bias"] = torch.zeros(C)
        w[f + "x_k"] = rand(1, 1, C)
        w[f + "key.weight"] = randn(F, C, scale=C ** -0.5)
        w[f + "value.weight"] = randn(C, F, scale=F ** -0.5)
    _head(randn, w, vocab, C, stop_token, banned=banned)
    _save(w, path)


def prepare(tree: Path) -> None:
    g = tree / G
    (g / "models").mkdir(parents=True, exist_ok=True)
    (g / "derive.py").write_text(DERIVE.lstrip())
    (g / "scripted.py").write_text(SCRIPTED.lstrip())
    (g / "chat_input.txt").write_text(CHAT_INPUT)
    (g / "v2_chat_input.txt").write_text(V2_CHAT_INPUT)
    (g / "api_chat_input.txt").write_text(API_CHAT_INPUT)
    rwkv4(g / "models" / "RWKV-4-Pile-tiny.pth")
    rwkv4(g / "models" / "RWKV-4-Raven-tiny.pth", seed=44)
    banned = _bad_utf8_tokens(tree / "rwkv_pip_package/src/rwkv/rwkv_vocab_v20230424.txt")
    rwkv5(g / "models" / "RWKV-5-World-tiny.pth", banned)
    rwkv6(g / "models" / "RWKV-6-World-tiny.pth", banned)
    rwkv7(tree / (V7_WORLD + ".pth"), banned)
    rwkv7(tree / (V7_G1 + ".pth"), banned, seed=77)


# v2/chat.py's copy finds prompt/, 20B_tokenizer.json and ../rwkv_pip_package/src beside it, as in v2/.
V2_LINKS = (f"mkdir -p {G}/v2 && ln -sfn ../../v2/prompt {G}/v2/prompt && "
            f"ln -sfn ../../v2/20B_tokenizer.json {G}/v2/20B_tokenizer.json && "
            f"ln -sfn ../rwkv_pip_package {G}/rwkv_pip_package")

STEPS = [
    Step("chat", f"rm -f {G}/chat.done && python {G}/derive.py chat && "
                 f"cat {G}/chat_input.txt | python {G}/scripted.py {G}/chat.py {G}/chat.done {CHAT_INPUT.count(chr(10))}",
         outputs=[f"{G}/chat.done"], timeout=400, env=ENV),
    Step("v2-chat", f"rm -f {G}/v2_chat.done && {V2_LINKS} && python {G}/derive.py v2-chat && "
                    f"cat {G}/v2_chat_input.txt | python {G}/scripted.py {G}/v2/chat.py {G}/v2_chat.done {V2_CHAT_INPUT.count(chr(10))}",
         outputs=[f"{G}/v2_chat.done"], timeout=400, env=ENV),
    Step("api-demo", f"rm -f {G}/api_demo.done && python API_DEMO.py && python API_DEMO_WORLD.py && "
                     f"touch {G}/api_demo.done",
         outputs=[f"{G}/api_demo.done"], timeout=600, env=ENV),
    Step("api-demo-chat", f"rm -f {G}/api_chat.done && "
                          f"cat {G}/api_chat_input.txt | python {G}/scripted.py API_DEMO_CHAT.py {G}/api_chat.done {API_CHAT_INPUT.count(chr(10))}",
         outputs=[f"{G}/api_chat.done"], timeout=300, env=ENV),
    Step("demos-v5-v6", f"rm -f {G}/demos.done && python {G}/derive.py v5 && python {G}/derive.py v6 && "
                        f"python {G}/RWKV_v5_demo.py && python {G}/RWKV_v6_demo.py && touch {G}/demos.done",
         outputs=[f"{G}/demos.done"], timeout=400, env=ENV),
]
