"""Tiny random-weight Hugging Face models and a tokenizer, built in code (no downloads)."""

from __future__ import annotations

import copy
from pathlib import Path

import torch

CORPUS = [
    "the quick brown fox jumps over the lazy dog",
    "speculative decoding drafts tokens and the target verifies them",
    "a cheap draft proposes and an exact rule accepts a prefix",
    "hello world, write a haiku about the sea and the sky",
    "def add(a, b): return a + b",
] * 20


def tiny_tokenizer(eos: bool = True):
    """A byte-level BPE tokenizer trained on a small corpus (300 tokens); without ``eos``,
    it names no end-of-sequence token, so generation runs to its budget."""
    from tokenizers import ByteLevelBPETokenizer
    from transformers import PreTrainedTokenizerFast

    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(CORPUS, vocab_size=300, min_frequency=1, special_tokens=["<s>", "</s>", "<pad>"])
    tok = PreTrainedTokenizerFast(
        tokenizer_object=bpe._tokenizer, bos_token="<s>", eos_token="</s>" if eos else None, pad_token="<pad>"
    )
    tok.chat_template = (
        "{% for m in messages %}<s>{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
        "{% if add_generation_prompt %}assistant:{% endif %}"
    )
    return tok


def tiny_llama(vocab_size: int, seed: int = 0, layers: int = 2, hidden: int = 64, eos: int | None = None):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=1024,
        eos_token_id=eos,
        bos_token_id=None,
        pad_token_id=None,
        tie_word_embeddings=False,
    )
    model = LlamaForCausalLM(cfg).eval()
    # Sharper output rows than default init, so greedy/sampled continuations are not near-uniform.
    with torch.no_grad():
        model.lm_head.weight.mul_(8.0)
    return model


def tiny_gemma3(vocab_size: int, window: int, pad_id: int | None = None):
    """A tiny Gemma 3 with sliding-window layers (two local, one global) and attention window ``window``."""
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    cfg = Gemma3TextConfig(
        vocab_size=vocab_size,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=3,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=16,
        sliding_window=window,
        max_position_embeddings=512,
        layer_types=["sliding_attention", "sliding_attention", "full_attention"],
        eos_token_id=None,
        pad_token_id=pad_id,
    )
    torch.manual_seed(0)
    return Gemma3ForCausalLM(cfg).eval()


def noisy_copy(model, scale: float, seed: int):
    """A draft that agrees with the target often but not always."""
    draft = copy.deepcopy(model)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in draft.parameters():
            p.add_(torch.randn(p.shape, generator=gen) * scale * p.std().clamp_min(1e-3))
    return draft


def save_tiny_pair(folder: Path, noise: float = 0.3) -> tuple[Path, Path]:
    """target/ and draft/ folders, each with a model and the shared tokenizer."""
    tok = tiny_tokenizer()
    target = tiny_llama(len(tok), seed=0, eos=tok.eos_token_id)
    draft = noisy_copy(target, noise, seed=1)
    paths = []
    for name, model in (("target", target), ("draft", draft)):
        path = Path(folder) / name
        model.save_pretrained(path)
        tok.save_pretrained(path)
        paths.append(path)
    return paths[0], paths[1]


def exact_joint(model, prompt, horizon, policy):
    """Enumerate the target chain of an HFCausalLM: p(x1) p(x2|x1) ... over V^H sequences."""
    joint = {(): 1.0}
    for _ in range(horizon):
        prefixes = list(joint)
        ids = torch.tensor([prompt + p for p in prefixes])
        with torch.no_grad():
            logits = model.model(input_ids=ids).logits[:, -1].float()
        states = [policy.initial_state(prompt + p) for p in prefixes]
        probs = policy.probabilities(logits, states, dtype=torch.float64)
        joint = {
            p + (x,): joint[p] * probs[i, x].item()
            for i, p in enumerate(prefixes)
            for x in range(probs.shape[1])
            if probs[i, x] > 0
        }
    return joint


def committed_kv(cache, slot: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Per layer (keys, values) float[kv_heads, n, head_dim] of a slot cache's committed rows, in order
    (read from its store: a slot's committed rows are its batch row's first columns)."""
    row, committed = cache.row_of(slot), len(cache.committed(slot))
    return [(k[row][:, :committed], v[row][:, :committed]) for k, v in zip(cache.store.keys, cache.store.values)]
