"""The llama.cpp backend on tiny GGUF files written in code: its rows do not depend on the call,
its cache ledger is llama.cpp's own sequences at every step, and the engine on it is exact."""

import numpy as np
import pytest
import torch

from specd.core.engine import EngineConfig, SpeculativeEngine
from specd.core.model import RowInput
from specd.core.processors import SamplingPolicy
from specd.core.proposer import ModelProposer
from specd.core.state import Request
from specd.errors import BackendFailed, ModelLoadError
from specd.models.llamacpp import model as llamacpp
from specd.models.llamacpp.lib import Context, GGUFModel
from specd.models.llamacpp.model import LlamaCppCache, LlamaCppLM
from specd.models.numbers import digits_only
from tests.llamacpp_helpers import gguf_tokenizer, needs_binding, tokenizer_fields, write_tiny_gguf

pytestmark = needs_binding
GREEDY = SamplingPolicy.build(temperature=0)
SAMPLED = SamplingPolicy.build(temperature=1.0)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("gguf")
    fields = tokenizer_fields(gguf_tokenizer())
    target = write_tiny_gguf(folder / "target.gguf", fields, seed=0)
    draft = write_tiny_gguf(folder / "draft.gguf", fields, seed=0, noise=(1, 0.6))
    return target, draft


@pytest.fixture(scope="module")
def pair(files):
    return LlamaCppLM(GGUFModel(files[0]), "target"), LlamaCppLM(GGUFModel(files[1]), "draft")  # torch's threads


def text(n: int, seed: int = 0) -> list[int]:
    return np.random.default_rng(seed).integers(3, 300, n).tolist()


def rows_of(ctx: Context, calls: list[list[tuple[int, int, int]]]) -> dict[tuple[int, int], torch.Tensor]:
    """(seq, token, position) rows per call, each asking for logits -> (seq, position) -> its row."""
    out = {}
    for call in calls:
        logits = ctx.decode(
            np.array([t for _, t, _ in call]),
            np.array([p for *_, p in call]),
            [s for s, *_ in call],
            np.ones(len(call), dtype=bool),
        )
        out.update({(s, p): row for (s, _, p), row in zip(call, logits)})
    return out


def test_a_position_scores_the_same_alone_and_in_any_call(pair):
    """A row of one sequence, scored alone (one row per call), is bit-identical in calls of 2..33
    rows, 64 and all, and beside three other sequences whose rejected rows leave holes (the
    property greedy identity rests on; measured on the real files by benchmarks/llamacpp_invariance.py)."""
    model = pair[0].file
    ctx = Context(model, cells=256, streams=4, threads=pair[0].threads)
    tokens = text(80)
    alone = rows_of(ctx, [[(0, t, p)] for p, t in enumerate(tokens)])
    for size in (2, 3, 5, 8, 17, 33, 64, 80):
        ctx.clear()
        calls = [[(0, t, p + j) for j, t in enumerate(tokens[p : p + size])] for p in range(0, len(tokens), size)]
        together = rows_of(ctx, calls)
        assert all(torch.equal(together[key], alone[key]) for key in alone), size
    ctx.clear()
    others, done = [text(80, seed) for seed in (1, 2, 3)], [0, 0, 0, 0]
    beside = {}
    while done[0] < len(tokens):
        seqs = [tokens, *others]
        call = [(s, seqs[s][p], p) for s in range(4) for p in range(done[s], min(done[s] + 5, 80))]
        beside.update(rows_of(ctx, [call]))
        for s in range(4):
            fed = min(done[s] + 5, 80)
            keep = fed if s == 0 else max(done[s] + 1, fed - 1 - (len(beside) + s) % 3)
            if keep < fed:
                ctx.remove(s, keep)
            done[s] = keep
    assert all(torch.equal(beside[(0, p)], alone[(0, p)]) for p in range(len(tokens)))


def test_rows_do_not_depend_on_the_thread_count(pair):
    """A product's output element and an attention row are each one thread's: 1 thread or 2, the same
    rows (so specd's threads setting never changes a text)."""
    tokens = text(40)
    rows = []
    for threads in (1, 2):
        ctx = Context(pair[0].file, cells=256, streams=1, threads=threads)
        rows.append(rows_of(ctx, [[(0, t, p + j) for j, t in enumerate(tokens[p : p + 7])] for p in range(0, 40, 7)]))
    assert all(torch.equal(rows[0][key], rows[1][key]) for key in rows[0])


class Audited:
    """Checks after every cache operation and step that each open slot's ledger length is llama.cpp's
    own count of its sequence's rows (``llama_memory_seq_pos_max`` + 1)."""

    def __init__(self, monkeypatch):
        self.checks = 0
        for name in ("open", "close", "commit", "reset"):
            self.wrap(monkeypatch, LlamaCppCache, name, lambda cache, *a: cache)
        self.wrap(monkeypatch, LlamaCppLM, "step", lambda lm, cache, *a, **k: cache)

    def wrap(self, monkeypatch, cls, name, cache_of):
        real = getattr(cls, name)

        def audited(*args, **kwargs):
            out = real(*args, **kwargs)
            self.check(cache_of(*args, **kwargs))
            return out

        monkeypatch.setattr(cls, name, audited)

    def check(self, cache: LlamaCppCache) -> None:
        assert cache.sequence_lengths() == {slot: cache.length(slot) for slot in cache.seq}
        self.checks += 1


def requests(n: int = 5) -> list[Request]:
    return [Request(f"r{i}", tuple(text(3 + 4 * i, seed=10 + i)), 8 + 2 * i, seed=i) for i in range(n)]


def test_the_ledger_is_llamas_sequences_through_a_sampled_batched_run(pair, monkeypatch):
    """A sampled run with a draft model (rejections), two requests at a time out of five (joins),
    budgets of different lengths (finishes), and a context grown past its first cells: after
    every step and cache operation of target and draft, ledger and llama.cpp agree. And the text is
    each request's target-only text alone (the invariant rule: the seed alone decides it)."""
    monkeypatch.setattr(llamacpp, "FIRST_CELLS", 64)  # the context must grow (and replay) mid-run
    audit = Audited(monkeypatch)
    target, draft = pair
    config = EngineConfig(k=4, rule="invariant")
    engine = SpeculativeEngine(target, ModelProposer(draft, SAMPLED), SAMPLED, config)
    session = engine.start()
    session.submit(requests())
    from specd.core.round import decode

    result = decode(session, batch_size=2)
    stats = result.stats
    assert stats.kv_discarded_rows > 0 and audit.checks > 100
    alone = [SpeculativeEngine.baseline(target, SAMPLED, config).run([r]).new_tokens()[0] for r in requests()]
    assert result.new_tokens() == alone


def test_greedy_speculation_is_llamas_plain_greedy_decoding(pair):
    """specd greedy with the draft model at K = 3, batch of three, equals llama.cpp fed one token
    per call from a fresh context (its own plain greedy decoding), token for token."""
    target, draft = pair
    batch = requests(3)
    got = SpeculativeEngine(target, ModelProposer(draft, GREEDY), GREEDY, EngineConfig(k=3)).run(batch).new_tokens()
    for r, tokens in zip(batch, got):
        ctx = Context(target.file, cells=256, streams=1, threads=target.threads)
        out = ctx.decode(
            np.array(r.prompt),
            np.arange(len(r.prompt)),
            [0] * len(r.prompt),
            np.arange(len(r.prompt)) == len(r.prompt) - 1,
        )
        plain = []
        for _ in range(r.max_new_tokens):
            plain.append(int(out[-1].argmax()))
            out = ctx.decode(np.array(plain[-1:]), np.array([len(r.prompt) + len(plain) - 1]), [0], np.ones(1, bool))
        assert list(tokens) == plain


def test_the_cache_refuses_rows_that_do_not_continue_and_frees_closed_sequences(pair):
    target = pair[0]
    cache = target.new_cache()
    cache.open(7)
    target.step(cache, [RowInput(7, (5, 6, 7), (0, 1, 2))], logits_for=1)
    with pytest.raises(Exception, match="expected positions"):
        target.step(cache, [RowInput(7, (8,), (5,))])
    assert cache.sequence_lengths() == {7: 3}  # the refused row never reached llama.cpp
    cache.commit(7, 1)
    assert cache.sequence_lengths() == {7: 1}
    cache.close(7)
    cache.open(8)
    assert cache.seq[8] == 0 and cache.sequence_lengths() == {8: 0}  # the sequence id is reused, empty


def test_slots_that_open_and_close_between_steps_keep_their_sequences(pair):
    """A slot opened after a step has no stream yet; when an older slot closes first, the new one
    takes its sequence (the last is moved down) and the next step rebuilds nothing it should not."""
    target = pair[0]
    cache = target.new_cache()
    for slot in (0, 1):
        cache.open(slot)
    target.step(cache, [RowInput(0, (5, 6, 7), (0, 1, 2)), RowInput(1, (8, 9), (0, 1))])
    cache.commit(0, 3)
    cache.commit(1, 2)
    cache.open(2)  # sequence 2: beyond the context's streams until the next step
    cache.close(0)  # sequence 0 is taken over by the last one (slot 2, no rows)
    assert cache.seq == {1: 1, 2: 0} and cache.sequence_lengths() == {1: 2, 2: 0}
    target.step(cache, [RowInput(1, (4,), (2,)), RowInput(2, (3, 4), (0, 1))])
    assert cache.sequence_lengths() == {1: 3, 2: 2} == {s: cache.length(s) for s in (1, 2)}


def test_logits_come_back_as_views_of_one_float32_tensor(pair):
    target = pair[0]
    cache = target.new_cache()
    for slot in (0, 1):
        cache.open(slot)
    out = target.step(cache, [RowInput(0, (5, 6, 7), (0, 1, 2)), RowInput(1, (8, 9), (0, 1))], logits_for=2)
    a, b = out.logits
    assert a.dtype == torch.float32 and a.shape == (2, target.vocab_size) and b.shape == (2, target.vocab_size)
    assert a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()  # one copy per call, not per row


def test_a_file_llama_cannot_read_is_one_line(tmp_path):
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF" + b"\0" * 64)
    with pytest.raises(ModelLoadError) as err:
        GGUFModel(bad)
    assert str(err.value).startswith(f"cannot load {bad} with llama.cpp") and "\n" not in str(err.value)
    with pytest.raises(ModelLoadError, match="GGUF file not found"):
        GGUFModel(tmp_path / "missing.gguf")


def test_a_context_fills_one_kept_batch_that_grows_and_refuses_an_empty_call(pair):
    """Context.decode writes its rows into arrays it keeps: a call of more rows than before grows them
    (the rows then are those of fresh calls), and a call of no rows is llama.cpp's one-line refusal."""
    model = pair[0].file
    text_ = text(40, seed=3)
    kept = Context(model, cells=256, streams=1, threads=pair[0].threads)
    small = kept.decode(text_[:3], range(3), [0] * 3, [True] * 3)
    grown = kept.decode(text_[3:40], range(3, 40), [0] * 37, [True] * 37)
    fresh = Context(model, cells=256, streams=1, threads=pair[0].threads)
    alone = [fresh.decode([t], [i], [0], [True])[0] for i, t in enumerate(text_)]
    assert torch.equal(torch.cat([small, grown]), torch.stack(alone))
    with pytest.raises(BackendFailed):
        Context(model, cells=256, streams=1, threads=pair[0].threads).decode([], [], [], [])


@pytest.mark.parametrize("text,whole", [("64", True), ("²", False), ("٣", False), ("9" * 5000, False), ("", False)])
def test_a_files_number_is_read_in_ascii_digits_only(text, whole):
    """A GGUF's metadata value, as llama.cpp writes it out: isdigit() takes '²', which int() refuses."""
    assert digits_only(text, 9) is whole
