"""Tiny random-weight Llama GGUF files, written in code with the ``gguf`` package's writer (no
downloads), and what the llama.cpp tests share."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from specd.models.llamacpp import lib as llamacpp_lib

needs_binding = pytest.mark.skipif(
    not llamacpp_lib.available(), reason="llama-cpp-python not installed (pip install 'specd[llamacpp]')"
)


def gguf_tokenizer():
    """A byte-level BPE tokenizer like tests.hf_helpers.tiny_tokenizer, its special tokens as SmolLM2's
    (``<|endoftext|>`` at id 0, transformers' GGUF reader adds it otherwise): written into the tiny
    GGUF files, it is also the tokenizer of a Hugging Face draft that agrees with them."""
    from tokenizers import ByteLevelBPETokenizer
    from transformers import PreTrainedTokenizerFast

    from tests.hf_helpers import CORPUS

    bpe = ByteLevelBPETokenizer()
    special = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    bpe.train_from_iterator(CORPUS, vocab_size=300, min_frequency=1, special_tokens=special)
    tok = PreTrainedTokenizerFast(
        tokenizer_object=bpe._tokenizer,
        bos_token="<|im_start|>",
        eos_token="<|im_end|>",
        unk_token="<|endoftext|>",
        pad_token="<|endoftext|>",
    )
    tok.chat_template = (
        "{% for m in messages %}<|im_start|>{{ m['role'] }}: {{ m['content'] }}<|im_end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant:{% endif %}"
    )
    return tok


def tokenizer_fields(tok) -> dict:
    """A Hugging Face byte-level BPE tokenizer as GGUF tokenizer fields (gpt2 model, as SmolLM2's file)."""
    tokens = tok.convert_ids_to_tokens(list(range(len(tok))))
    merges = json.loads(tok.backend_tokenizer.to_str())["model"]["merges"]
    merges = [m if isinstance(m, str) else " ".join(m) for m in merges]
    special = set(tok.all_special_ids)
    return {
        "tokens": tokens,
        "merges": merges,
        "types": [3 if i in special else 1 for i in range(len(tokens))],  # 3: control, 1: normal
        "bos": tok.bos_token_id,
        "eos": tok.eos_token_id,
        "pad": tok.pad_token_id,
        "unk": tok.unk_token_id,
        "template": tok.chat_template,
    }


def plain_tokens(vocab: int) -> dict:
    """Fields of a vocabulary of ``vocab`` tokens (the oracle's tiny tables): letters, the last one the
    merge of the first two (llama.cpp's BPE reader wants a merge)."""
    letters = [chr(ord("a") + i) for i in range(vocab - 1)] + ["ab"]
    return {
        "tokens": letters,
        "merges": ["a b"],
        "types": [1] * vocab,
        "bos": 0,
        "eos": 0,
        "pad": 0,
        "unk": 0,
        "template": None,
    }


def write_tiny_gguf(
    path: Path,
    fields: dict,
    seed: int = 0,
    layers: int = 2,
    hidden: int = 64,
    quant: str = "Q4_1",
    noise: tuple[int, float] | None = None,
    sharpen: float = 4.0,
) -> Path:
    """A tiny Llama (2 heads, 1 K/V head, head dim hidden/2) with random weights from ``seed``,
    its 2D weights quantized as ``quant`` (Q4_1 like the embedded SmolLM2, Q8_0 or F32), norms in
    float32; ``noise`` (seed, scale): the weights of ``seed`` plus that much noise of its own (a
    draft close to the target). ``sharpen`` scales the output head (greedy rows not near-uniform)."""
    import gguf

    vocab, heads, kv_heads = len(fields["tokens"]), 2, 1
    head_dim, inner = hidden // heads, 2 * hidden
    rng = np.random.default_rng(seed)
    extra = np.random.default_rng(noise[0]) if noise else None

    def weight(*shape: int, scale: float = 0.08) -> np.ndarray:
        w = rng.standard_normal(shape, dtype=np.float32) * scale
        if extra is not None:
            w += extra.standard_normal(shape, dtype=np.float32) * noise[1] * scale
        return w

    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_block_count(layers)
    writer.add_context_length(1024)
    writer.add_embedding_length(hidden)
    writer.add_feed_forward_length(inner)
    writer.add_head_count(heads)
    writer.add_head_count_kv(kv_heads)
    writer.add_rope_dimension_count(head_dim)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_vocab_size(vocab)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("gpt-2")
    writer.add_token_list(fields["tokens"])
    writer.add_token_types(fields["types"])
    writer.add_token_merges(fields["merges"])
    writer.add_bos_token_id(fields["bos"])
    writer.add_eos_token_id(fields["eos"])
    writer.add_pad_token_id(fields["pad"])
    writer.add_unk_token_id(fields["unk"])  # else transformers' reader adds a token of its own
    writer.add_add_bos_token(False)
    if fields["template"]:
        writer.add_chat_template(fields["template"])
    kind = getattr(gguf.GGMLQuantizationType, quant)

    def add(name: str, w: np.ndarray) -> None:
        if w.ndim == 2 and kind != gguf.GGMLQuantizationType.F32:
            writer.add_tensor(name, gguf.quants.quantize(w, kind), raw_dtype=kind)
        else:
            writer.add_tensor(name, w)

    add("token_embd.weight", weight(vocab, hidden, scale=1.0))
    for i in range(layers):
        add(f"blk.{i}.attn_norm.weight", np.ones(hidden, dtype=np.float32))
        add(f"blk.{i}.attn_q.weight", weight(hidden, hidden))
        add(f"blk.{i}.attn_k.weight", weight(kv_heads * head_dim, hidden))
        add(f"blk.{i}.attn_v.weight", weight(kv_heads * head_dim, hidden))
        add(f"blk.{i}.attn_output.weight", weight(hidden, hidden))
        add(f"blk.{i}.ffn_norm.weight", np.ones(hidden, dtype=np.float32))
        add(f"blk.{i}.ffn_gate.weight", weight(inner, hidden))
        add(f"blk.{i}.ffn_up.weight", weight(inner, hidden))
        add(f"blk.{i}.ffn_down.weight", weight(hidden, inner))
    add("output_norm.weight", np.ones(hidden, dtype=np.float32))
    add("output.weight", weight(vocab, hidden, scale=0.08 * sharpen))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path
