"""The table a shared-body draft (``self:vocab=N``) reads its N tokens from: checked against a local
target's vocabulary before any weights load, else the named table, else this target's cached table,
built from its own generations on first use (specd.models.vocab_table)."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Sequence

from specd.core.shared_body import check_size
from specd.files import read_text
from specd.models.hf.model import HFCausalLM
from specd.models.run.drafts import DraftSpec
from specd.models.run.embedded import cache_root
from specd.models.vocab_table import build_table, read_table, tokenizer_digest, write_table


def precheck_draft_vocabulary(shared: Sequence[DraftSpec], folder: str | None, table: str | None, trust: bool):
    """self:vocab=N against a local target folder's vocabulary, and the table (when one is named)
    against its tokenizer, before the weights load (a hub id or GGUF is checked after loading).
    -> (the table read and checked, the tokenizer read to check it), each None when not read."""
    if not folder or not os.path.isfile(os.path.join(folder, "config.json")):
        return None, None
    config = json.loads(read_text(os.path.join(folder, "config.json"), "the target's config.json"))
    vocab = config.get("vocab_size") or (config.get("text_config") or {}).get("vocab_size")
    if not isinstance(vocab, int):
        return None, None
    for spec in shared:
        check_size(spec.value, vocab, f"--draft {spec.text}", smallest=2)
    if table is None:
        return None, None
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(folder, trust_remote_code=trust)
    checked = read_table(table, tokenizer_digest(tok), min(vocab, len(tok)))  # the bound draft_vocabulary reads with
    checked.columns(max(s.value for s in shared), f"--draft {shared[0].text}")
    return checked, tok


def draft_vocabulary(target: HFCausalLM, tokenizer, path: str | None, chat: bool | None, report=None):
    """The self:vocab=N table: the named one (--draft-vocab, or an embedded model's shipped table), else
    this target's cached table, built from its own generations on first use (specd.models.vocab_table)."""
    digest = tokenizer_digest(tokenizer)
    vocab = min(target.vocab_size, len(tokenizer))
    if path is not None:
        return read_table(path, digest, vocab)
    key = hashlib.sha256(f"{target.identity}:{digest}".encode()).hexdigest()[:20]
    cached = cache_root() / "vocab" / f"{key}.json"
    if cached.is_file():
        return read_table(cached, digest, vocab)
    if report:
        report(f"first use of self:vocab=N with {target.name}: ranking its vocabulary from its own generations (once)")
    table = build_table(target.model, tokenizer, vocab, target.name, chat=bool(chat))
    write_table(table, cached)
    if report:
        report(f"draft vocabulary table cached at {cached}")
    return table
