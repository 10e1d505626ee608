"""What every gauntlet recipe shares: the step type and the synthetic-input makers.

A recipe (``bench/gauntlet_repos/NAME.py``, beside ``NAME.toml``) is the repository's own commands, scaled
down by the repository's own flags, on synthetic data and tiny random weights that the
recipe makes itself (nothing is downloaded). It defines:

- ``prepare(tree: Path) -> None``: writes the data, weights and tokenizers the steps read,
  inside ``tree`` (or under ``tree/_gauntlet/``). It runs in the recipe's virtual
  environment, on the original and on the port alike, before the first step.
- ``STEPS``: a list of :class:`Step`, run in order from the tree's root with ``bash -c``
  and the recipe's environment first on ``PATH`` (``python`` and ``torchrun`` are the
  environment's). A step passes when it exits 0 and every path in ``outputs`` exists
  (a glob pattern matches at least one file) afterwards.

Only torch and the standard library may be imported at this module's top level: the
runner imports recipes to list them, in porter's own environment.
"""

from __future__ import annotations

import contextlib
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence


@dataclass(frozen=True)
class Step:
    name: str
    command: str
    outputs: Sequence[str] = ()
    timeout: float = 600.0
    env: Mapping[str, str] = field(default_factory=dict)


def step_environment(step: Step, tree: Path | str, env: Mapping[str, str]) -> dict[str, str]:
    """``env`` with the step's own variables (``{tree}`` filled in); the step's ``PYTHONPATH``
    goes before the one ``env`` has (a harness's seeding or emulation site stays found)."""
    out = dict(env)
    for key, value in step.env.items():
        value = value.replace("{tree}", str(tree))
        out[key] = f"{value}:{env['PYTHONPATH']}" if key == "PYTHONPATH" and env.get("PYTHONPATH") else value
    return out


#: For a recipe's ``sitecustomize``: ``torch.utils.data.Sampler(data_source)``, which code written for
#: torch < 2.2 calls (StyleGAN-family samplers) and newer torch refuses; not a CUDA matter.
SAMPLER_SHIM = '''\
try:
    import torch.utils.data as _data

    def _sampler_init(self, data_source=None):  # torch < 2.2 accepted (and ignored) the data source
        pass

    _data.Sampler.__init__ = _sampler_init
except Exception:
    pass
'''


def save_cuda_checkpoint(obj: Any, path: Path | str) -> None:
    """``torch.save(obj, path)`` as a CUDA machine writes it: every storage tagged ``cuda:0``.

    Loading it without ``map_location`` off CUDA raises, as a checkpoint from a GPU box
    does ("Attempting to deserialize object on a CUDA device but
    torch.cuda.is_available() is False"). Made on the CPU by tagging storages at save
    time, so no GPU is needed to write it.
    """
    import torch

    Path(path).parent.mkdir(parents=True, exist_ok=True)
    with cuda_tags():
        torch.save(obj, str(path))


@contextlib.contextmanager
def cuda_tags():
    """Inside, torch tags every CPU storage it pickles ``cuda:0`` (``torch.save``, and a
    pickler of the repository's own, such as StyleGAN's dill snapshots)."""
    from torch import serialization

    original = serialization.location_tag

    def cuda_tag(storage):
        tag = original(storage)
        return "cuda:0" if tag == "cpu" else tag

    serialization.location_tag = cuda_tag
    try:
        yield
    finally:
        serialization.location_tag = original


def rng(seed: int = 0) -> random.Random:
    return random.Random(seed)


def write_images(folder: Path | str, count: int, size: int = 32, classes: Sequence[str] = ("a", "b"),
                 suffix: str = ".png", seed: int = 0, class_folders: bool = True) -> list[Path]:
    """``count`` random RGB images per class under ``folder/CLASS/`` (or flat), via Pillow."""
    import numpy as np
    from PIL import Image

    generator = np.random.default_rng(seed)
    written = []
    for name in classes if class_folders else ("",):
        target = Path(folder) / name
        target.mkdir(parents=True, exist_ok=True)
        for i in range(count):
            pixels = generator.integers(0, 256, size=(size, size, 3), dtype=np.uint8)
            path = target / f"{name or 'img'}_{i:04d}{suffix}"
            Image.fromarray(pixels).save(path)
            written.append(path)
    return written


def synthetic_text(words: int = 4000, seed: int = 0) -> str:
    """Plain English-like text, for tokenizers and character-level data."""
    vocabulary = ("the model learns a small function of its inputs and writes loss to the log "
                  "while data flows through layers of attention and weights").split()
    r = rng(seed)
    lines, line = [], []
    for i in range(words):
        line.append(r.choice(vocabulary))
        if len(line) == 12:
            lines.append(" ".join(line).capitalize() + ".")
            line = []
    return "\n".join(lines) + "\n"


def train_sentencepiece(text: str, prefix: Path | str, vocab_size: int = 64) -> Path:
    """A tiny SentencePiece model (``prefix.model``) trained on ``text``; needs sentencepiece."""
    import sentencepiece as spm

    prefix = Path(prefix)
    prefix.parent.mkdir(parents=True, exist_ok=True)
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(text.splitlines()), model_prefix=str(prefix), vocab_size=vocab_size,
        model_type="bpe", character_coverage=1.0, bos_id=1, eos_id=2, unk_id=0, pad_id=-1,
        minloglevel=2,
    )
    return prefix.with_suffix(".model")


def fake_hub_model(home: Path | str, repo_id: str, save) -> Path:
    """Lay out a model in a Hugging Face cache under ``home`` (``HF_HOME``), as a download would.

    ``save(folder)`` writes the files (``model.save_pretrained(folder)``). With
    ``HF_HOME=home`` and ``HF_HUB_OFFLINE=1`` in a step's ``env``, ``from_pretrained(repo_id)``
    finds it without a network.
    """
    cache = Path(home) / "hub" / ("models--" + repo_id.replace("/", "--"))
    revision = "0" * 40
    snapshot = cache / "snapshots" / revision
    snapshot.mkdir(parents=True, exist_ok=True)
    save(snapshot)
    (cache / "refs").mkdir(exist_ok=True)
    (cache / "refs" / "main").write_text(revision)
    return snapshot


def tiny_llama(folder: Path | str, text: str, pad_token_id=None):
    """A tiny random Llama's config and slow (SentencePiece) tokenizer, saved in ``folder``
    from a tokenizer trained on ``text``; needs transformers and sentencepiece. Returns
    (tokenizer, config): the weights are the recipe's to write, the way its checkpoint comes."""
    import transformers

    folder = Path(folder)
    spm = train_sentencepiece(text, folder.parent / "spm" / "tok", vocab_size=96)
    tokenizer = transformers.LlamaTokenizer(vocab_file=str(spm), legacy=True)
    tokenizer.save_pretrained(folder)
    config = transformers.LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=128,
        bos_token_id=1, eos_token_id=2, pad_token_id=pad_token_id)
    transformers.set_seed(0)
    return tokenizer, config
