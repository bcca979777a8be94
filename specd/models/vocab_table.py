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
from specd.errors import UsageError, shown
from specd.files import MAX_CONFIG_BYTES, loads_json, read_text, write_text_atomic

FORMAT = "specd.vocab-frequency/v1"
MAX_RANKED = 32768  # the widest draft vocabulary a table serves
CHUNK = 8  # prompts per scoring forward: float64 rows of a 262,144-token vocabulary are 2 MB each
DATA = Path(__file__).parent / "data"

# The table corpus: chat, writing, code, math, format, translation and rewriting requests, written
# for the tables and sharing no word 5-gram with any benchmark prompt (benchmarks/corpus/*.jsonl and every
# prompt of benchmarks/*.py; tests/models/test_vocab_table.py checks), so that no benchmark measures a
# table on the text it was built from.
PROMPTS = (
    "How does a refrigerator keep food cold?",
    "Tell me about the history of the bicycle.",
    "What makes a good team leader? Give examples.",
    "Describe how volcanoes form along plate boundaries.",
    "Draft a thank-you note to a neighbour who watered my plants.",
    "Compose a limerick about a forgetful wizard.",
    "Tell a bedtime tale about a fox who wanted to fly.",
    "Invent a recipe for a vegetable soup and explain each step.",
    "What is the difference between weather and climate?",
    "Give advice to someone moving abroad for the first time.",
    "def binary_search(arr, target):\n    lo, hi = 0, len(arr) - 1\n",
    "Explain what a REST API is, with a small example request.",
    "class Stack:\n    def __init__(self):\n",
    "How would you sort a dictionary by value in Python?",
    "CREATE TABLE employees (\n    id INTEGER PRIMARY KEY,\n",
    "const express = require('express');\nconst app = express();\n",
    "Solve: a pool fills at 15 litres per minute; how long for 900 litres?",
    "What is 17 multiplied by 23? Show your working.",
    "If a shirt costs 40 euros after a 20 percent discount, what was the original price?",
    "Explain the Pythagorean theorem with a worked example.",
    "Render this as JSON: name Ivo, role engineer, skills Go and Rust.",
    "Put these into alphabetical order: pear, apple, mango, cherry, banana.",
    "Reword this sentence more simply: The committee has reached a consensus regarding the proposal.",
    "Condense this into one line: The meeting ran long because the budget figures had to be checked twice.",
    "Traduis en anglais : Le chat dort sur le canapé depuis ce matin.",
    "Traduce al inglés: Mañana vamos a visitar a mis abuelos en el pueblo.",
    "Übersetze ins Englische: Ich habe heute keine Zeit, aber morgen gern.",
    "What were the main achievements of the Roman engineers?",
    "Describe the life cycle of a butterfly.",
    "Why do leaves change colour in the autumn?",
    "Write a product review of a pair of running shoes.",
    "How do vaccines train the immune system?",
    "Plan a one-day visit to a city you like, hour by hour.",
    "What are prime numbers used for in cryptography?",
    "Suggest five names for a small bakery and explain each.",
    "Write a cover letter opening for a nursing position.",
    "How does a bill become a law in a parliament?",
    "Describe the sound of a thunderstorm to someone who has never heard one.",
    "Give me a packing checklist for a beach weekend.",
    "The meeting notes say: budget approved, launch moved to June, two new hires. Turn them into an email.",
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
        raise UsageError(f"{where}: its ranked ids are cut short or not integers (count {shown(data.get('count'))})")
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
    counts = torch.zeros((), dtype=torch.float64, device=device)
    for rows in torch.arange(len(encoded)).split(CHUNK):  # a chunk's float64 rows, not the whole set's
        logits = model(seq[rows], attention_mask=full[rows], position_ids=positions[rows]).logits.double()
        counts = counts + (torch.softmax(logits, dim=-1) * full[rows].unsqueeze(-1)).sum(dim=(0, 1))
    return counts.cpu()  # padding positions count nothing


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
