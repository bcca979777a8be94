"""Build the shipped self:vocab=N tables of the embedded models (specd/models/data/*.vocab.json).

    python benchmarks/vocab_tables.py [NAME ...]      # default: every embedded model

Each table ranks the model's vocabulary by the probability it puts on each token over its own
greedy generations from the shipped prompt set (specd.models.vocab_table). Deterministic: the
same model, prompts and transformers version give the same file.
"""

from __future__ import annotations

import sys
import time

import torch

from specd.models.hf.loading import load
from specd.models.run.embedded import EMBEDDED, ensure_embedded
from specd.models.vocab_table import DATA, build_table, write_table

NEW_TOKENS = 96


def main(names: list[str]) -> None:
    torch.set_num_threads(2)
    for name in names or list(EMBEDDED):
        model = EMBEDDED[name]
        folder = ensure_embedded(name, print)
        loaded = load(str(folder), None, torch.float32, torch.device("cpu"))
        started = time.perf_counter()
        vocab = min(loaded.model.config.vocab_size, len(loaded.tokenizer))
        table = build_table(loaded.model, loaded.tokenizer, vocab, model.label, NEW_TOKENS, chat=model.chat)
        write_table(table, DATA / model.vocab_table)
        seconds = time.perf_counter() - started
        print(f"{name}: {len(table.ranked)} ranked ids -> {DATA / model.vocab_table} ({seconds:.0f} s)")


if __name__ == "__main__":
    main(sys.argv[1:])
