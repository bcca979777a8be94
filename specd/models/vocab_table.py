"""The draft vocabulary of ``self:vocab=N``: a frequency-ranked token table per model.

A table ranks token ids by how much probability the model itself puts on them: the sum, over
every position of its own greedy generations from the shipped prompt set (``PROMPTS``) and
over every position of those prompts, of its softmax row (an expected count, which ranks
the long tail too, where sampled counts would be zero). The draft vocabulary of
``self:vocab=N`` is the table's first N ids.

The file (JSON, ``FORMAT``) names the tokenizer it ranks (a SHA-256 over its vocabulary), the
vocabulary size, how it was built (the model, prompts, tokens generated, specd and
transformers versions) and the ranked ids, at most ``MAX_RANKED``. An embedded model ships its
table in ``specd/models/data``; for any other target specd builds one on first use, once, and
caches it under the user's cache directory (``--draft-vocab FILE`` names a table instead).
A table that is missing, cut short, for another tokenizer, or holding ids outside the
vocabulary or twice, is refused in one line before any weights load.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

import torch

from specd import __version__ as SPECD_VERSION
from specd.errors import UsageError
from specd.files import MAX_CONFIG_BYTES, loads_json, read_text, write_text_atomic

FORMAT = "specd.vocab-frequency/v1"
MAX_RANKED = 32768  # the widest draft vocabulary a table serves
DATA = Path(__file__).parent / "data"

# The prompt set the tables are built from: chat, writing, code, math, summaries, questions.
PROMPTS = (
    "What is the capital of France, and what is it known for?",
    "Write a short story about a lighthouse keeper who finds a message in a bottle.",
    "Explain how photosynthesis works to a ten-year-old.",
    'def fibonacci(n):\n    """Return the n-th Fibonacci number."""\n',
    "Summarize the main causes of the First World War in a few sentences.",
    "A train leaves at 3 pm travelling at 60 km/h. How far has it gone by 5:30 pm?",
    "Give me three tips for staying focused while working from home.",
    "Translate into French: The weather is lovely today, let us go for a walk.",
    "Write a haiku about autumn leaves.",
    "What are the differences between a list and a tuple in Python?",
    "The history of the printing press begins in",
    "Dear hiring manager, I am writing to apply for the position of",
    "Describe the water cycle step by step.",
    "SELECT name, COUNT(*) FROM orders GROUP BY name ORDER BY",
    "Why is the sky blue? Answer in one paragraph.",
    "List five healthy breakfast ideas with a sentence on each.",
    "Once upon a time, in a village at the edge of a great forest,",
    "How do I reverse a string in JavaScript?",
    "If a recipe needs 3 eggs for 12 cookies, how many eggs do I need for 30 cookies?",
    "Write an email to a colleague asking to move our meeting to Thursday.",
    "What is machine learning? Explain it simply.",
    "The quick brown fox jumps over the lazy dog. Continue this text:",
    "Compare the climates of Norway and Egypt.",
    "import numpy as np\n\ndef normalize(x):\n",
)


@dataclass(frozen=True)
class VocabTable:
    ranked: tuple[int, ...]  # token ids, most frequent first
    tokenizer: str  # tokenizer_digest of the tokenizer it ranks
    vocab_size: int
    provenance: dict
    path: str = ""

    def columns(self, n: int, where: str = "self:vocab=N") -> tuple[int, ...]:
        """The draft vocabulary: the first n ranked ids."""
        if n > len(self.ranked):
            raise UsageError(
                f"{where}: the draft vocabulary table {self.path} ranks {len(self.ranked)} tokens, fewer than N = {n}"
            )
        return self.ranked[:n]

    def to_json(self) -> str:
        return json.dumps(
            {
                "format": FORMAT,
                "tokenizer": self.tokenizer,
                "vocab_size": self.vocab_size,
                "count": len(self.ranked),
                "provenance": self.provenance,
                "ranked": list(self.ranked),
            },
            separators=(",", ":"),
        )


def tokenizer_digest(tokenizer) -> str:
    """SHA-256 over the tokenizer's vocabulary (token -> id): two tokenizers with one digest map
    every token to the same id."""
    vocab = sorted(tokenizer.get_vocab().items(), key=lambda item: item[1])
    return hashlib.sha256(json.dumps(vocab, ensure_ascii=False).encode("utf-8", "surrogatepass")).hexdigest()


def read_table(path: str | Path, tokenizer_sha: str, vocab_size: int) -> VocabTable:
    """A table file, checked against the run's tokenizer and vocabulary, or one line saying why not."""
    where = f"draft vocabulary table {path}"
    data = loads_json(
        read_text(path, "draft vocabulary table", limit=MAX_CONFIG_BYTES), where, what="cut short or not JSON"
    )
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise UsageError(f"{where}: not a {FORMAT} file")
    ranked = data.get("ranked")
    if not isinstance(ranked, list) or not all(type(t) is int for t in ranked) or data.get("count") != len(ranked):
        raise UsageError(f"{where}: its ranked ids are cut short or not integers (count {data.get('count')!r})")
    if data.get("tokenizer") != tokenizer_sha:
        theirs = str(data.get("tokenizer"))[:12]
        raise UsageError(
            f"{where}: it ranks another tokenizer's ids (tokenizer digest {theirs}, this run's {tokenizer_sha[:12]})"
        )
    bad = next((t for t in ranked if not 0 <= t < vocab_size), None)
    if bad is not None:
        raise UsageError(f"{where}: token id {bad} is outside the vocabulary [0, {vocab_size})")
    if len(set(ranked)) != len(ranked):
        raise UsageError(f"{where}: a token id is ranked twice")
    return VocabTable(tuple(ranked), tokenizer_sha, vocab_size, data.get("provenance") or {}, str(path))


def write_table(table: VocabTable, path: str | Path) -> None:
    """Write atomically, then read it back (a table specd writes must read back)."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(path, table.to_json(), "draft vocabulary table")
    read_table(path, table.tokenizer, table.vocab_size)


@torch.no_grad()
def expected_counts(model, tokenizer, prompts=PROMPTS, new_tokens: int = 48, chat: bool = False) -> torch.Tensor:
    """float64[V]: the sum of the model's softmax rows over every position of its greedy
    generations from ``prompts`` (``new_tokens`` each, all prompts in one left-padded batch) and
    of the prompts themselves."""
    device = next(model.parameters()).device
    encoded = []
    for prompt in prompts:
        if chat and getattr(tokenizer, "chat_template", None):
            ids = tokenizer.apply_chat_template([{"role": "user", "content": prompt}], add_generation_prompt=True)
            ids = ids["input_ids"] if hasattr(ids, "keys") else ids
        else:
            ids = tokenizer(prompt)["input_ids"]
        encoded.append(list(ids))
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else (tokenizer.eos_token_id or 0)
    width = max(len(ids) for ids in encoded)
    x = torch.tensor([[pad] * (width - len(ids)) + ids for ids in encoded], device=device)
    mask = torch.tensor([[0] * (width - len(ids)) + [1] * len(ids) for ids in encoded], device=device)
    seq = model.generate(
        x, attention_mask=mask, max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False, pad_token_id=pad
    )
    full = torch.cat([mask, torch.ones(len(encoded), seq.shape[1] - width, dtype=mask.dtype, device=device)], dim=1)
    positions = (full.cumsum(dim=1) - 1).clamp_min(0)
    logits = model(seq, attention_mask=full, position_ids=positions).logits.double()
    rows = torch.softmax(logits, dim=-1) * full.unsqueeze(-1)  # padding positions count nothing
    return rows.sum(dim=(0, 1)).cpu()


def rank(counts: torch.Tensor, vocab_size: int, keep: int = MAX_RANKED) -> tuple[int, ...]:
    """Token ids by expected count, most first, ties by id; at most ``keep`` of them."""
    order = torch.argsort(-counts[:vocab_size], stable=True)  # stable: ties keep id order
    return tuple(order[: min(keep, vocab_size - 1)].tolist())


def build_table(model, tokenizer, vocab_size: int, name: str, new_tokens: int = 32, chat: bool = False) -> VocabTable:
    """A table from the model's own generations on the shipped prompt set (see the module docstring)."""
    import transformers

    counts = expected_counts(model, tokenizer, PROMPTS, new_tokens, chat)
    provenance = {
        "model": name,
        "method": "sum of the model's softmax rows over its greedy generations and the prompts",
        "prompts": len(PROMPTS),
        "prompt_set_sha256": hashlib.sha256("\n\x00".join(PROMPTS).encode()).hexdigest(),
        "new_tokens_per_prompt": new_tokens,
        "chat_template": chat,
        "specd": SPECD_VERSION,
        "transformers": transformers.__version__,
    }
    return VocabTable(rank(counts, vocab_size), tokenizer_digest(tokenizer), vocab_size, provenance)
