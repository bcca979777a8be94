"""The host's time outside the model, per round: specd against Hugging Face, side by side in one run.

    python benchmarks/host_cost.py [--layers 4] [--hidden 64] [--vocab 512] [--tokens 64] [--repeats 5]
                                   [--threads 1] [--batch 1] [--json OUT]

A tiny random-weight Llama (no download) is small enough that its model calls cost about what the
code around them costs, so the host's own work per round shows. Every model call is timed by
forward hooks on the decoder body and on the output head (Hugging Face's ``lm_head``, specd's own
head over the same weight); what is left of the wall time is host work: inputs, masks, caches,
processors, the rule, staging, publication, the generate loop.

Two comparisons, each interleaved in one process, the order alternating per repeat:
- target-only: specd ``baseline=True`` against Hugging Face greedy ``generate``: host ms per round
  (specd) over host ms per step (Hugging Face);
- K = 4, the draft a copy of the target (every draft accepted: 5 tokens a round for both): specd
  ``k=4`` against Hugging Face's assisted generation with the same draft model, 4 assistant tokens
  a round on a constant schedule and no confidence stop: host ms per round over HF's.

Each figure is marginal: a run of 2N tokens minus a run of N tokens, in host time and in rounds, so
what a run pays once (tokenizing, admission, prefill, building the generation config) cancels. With
one torch thread (the default) times are the thread's CPU time (``time.thread_time``): every
operation runs on it, and another process holding a core does not count.
Outputs are checked equal to Hugging Face greedy's. Printed: each system's host ms per round and
model ms per round and the whole round's (medians over repeats), then the two host ratios and the
same two over the whole round: specd's own code inside a model call (its linear layers' product
forms, its K/V store's writes) is model time to the hooks. Not a test: it measures.
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(1, str(Path(__file__).resolve().parents[1]))  # tests.hf_helpers

from arguments import positive  # noqa: E402
from heldout import refuse_outputs  # noqa: E402

import specd  # noqa: E402
from specd.files import write_text_atomic  # noqa: E402


class ModelClock:
    """Seconds spent in the decoder body and the output head, by forward hooks (nested calls count once),
    on ``clock``."""

    def __init__(self, clock=time.perf_counter) -> None:
        self.clock = clock
        self.seconds = 0.0
        self._depth = 0
        self._started = 0.0

    def enter(self, *_args) -> None:
        if self._depth == 0:
            self._started = self.clock()
        self._depth += 1

    def leave(self, *_args) -> None:
        self._depth -= 1
        if self._depth == 0:
            self.seconds += self.clock() - self._started

    def watch(self, module: torch.nn.Module) -> None:
        module.register_forward_pre_hook(self.enter)
        module.register_forward_hook(self.leave)

    def take(self) -> float:
        seconds, self.seconds = self.seconds, 0.0
        return seconds


def time_specd_head(clock: ModelClock) -> None:
    """specd's own output head (``specd.models.hf.head.OutputHead``, over the model's lm_head weight):
    its calls count as model time, as Hugging Face's ``lm_head`` calls do."""
    from specd.models.hf.head import OutputHead

    plain = OutputHead.__call__

    def timed(self, hidden):
        clock.enter()
        try:
            return plain(self, hidden)
        finally:
            clock.leave()

    OutputHead.__call__ = timed  # type: ignore[method-assign]


def tiny_tokenizer(vocab: int):
    """A byte-level BPE tokenizer of about ``vocab`` tokens with no end-of-sequence token: every run goes
    to its budget."""
    from tokenizers import ByteLevelBPETokenizer
    from transformers import PreTrainedTokenizerFast

    words = [f"{a}{b}{c}" for a in "bcdfgklmnprst" for b in "aeiou" for c in "nrstlm"]
    corpus = [" ".join(words[i : i + 12]) for i in range(0, len(words), 3)] * 4
    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(corpus, vocab_size=vocab, min_frequency=1, special_tokens=["<s>", "<pad>"])
    return PreTrainedTokenizerFast(tokenizer_object=bpe._tokenizer, bos_token="<s>", pad_token="<pad>")


def tiny_llama(vocab: int, layers: int, hidden: int):
    """The suite's tiny random Llama (tests/hf_helpers.py), generating to its budget: no EOS."""
    from tests.hf_helpers import tiny_llama as suite_llama

    model = suite_llama(vocab, layers=layers, hidden=hidden)
    model.generation_config.pad_token_id = 0
    return model


class Systems:
    """The four systems over one target (and its copy as the draft), sharing the hooked modules."""

    def __init__(self, a) -> None:
        self.tokenizer = tiny_tokenizer(a.vocab)
        self.target = tiny_llama(len(self.tokenizer), a.layers, a.hidden)  # every id one the tokenizer names
        self.draft = copy.deepcopy(self.target)
        self.draft.generation_config.num_assistant_tokens = 4
        self.draft.generation_config.num_assistant_tokens_schedule = "constant"
        self.draft.generation_config.assistant_confidence_threshold = 0.0
        # With one torch thread every operation runs on this thread: its CPU time is the work's own, and
        # another process holding a core (a 2-core machine) does not count; with more, wall time.
        self.now = time.thread_time if a.threads == 1 else time.perf_counter
        self.clock = ModelClock(self.now)
        for model in (self.target, self.draft):
            self.clock.watch(model.model)
            self.clock.watch(model.lm_head)
        time_specd_head(self.clock)
        self.pair = specd.Pair.load(self.target, [self.draft], tokenizer=self.tokenizer, chat=False)
        self.prompts = [f"the quick brown fox {i} jumps over" for i in range(a.batch)]
        ids = self.tokenizer(self.prompts[0], return_tensors="pt").input_ids
        self.ids = ids.repeat(a.batch, 1)

    def run(self, name: str, tokens: int) -> tuple[float, float, int, list[list[int]]]:
        """One run -> (host seconds, model seconds, rounds, token ids per request)."""
        self.clock.take()
        started = self.now()
        if name.startswith("hf"):
            kw = {"assistant_model": self.draft} if name == "hf assisted" else {}
            with torch.no_grad():
                out = self.target.generate(
                    self.ids, max_new_tokens=tokens, min_new_tokens=tokens, do_sample=False, **kw
                )
            wall = self.now() - started
            new = out[:, self.ids.shape[1] :].tolist()
            steps = tokens if name == "hf greedy" else -(-tokens // 5)  # assisted: 5 tokens a round (all kept)
        else:
            kw = {"baseline": True} if name == "specd target-only" else {"k": 4}
            run = self.pair.generate(self.prompts, max_new_tokens=tokens, **kw)
            wall = self.now() - started
            new = [list(r.tokens) for r in run.results]
            steps = run.stats["rounds"]
        model = self.clock.take()
        return wall - model, model, steps, new


PAIRS = (("specd target-only", "hf greedy"), ("specd k=4", "hf assisted"))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--layers", type=positive, default=4)
    ap.add_argument("--hidden", type=positive, default=64)
    ap.add_argument("--vocab", type=positive, default=512, help="the tokenizer's size (about; BPE may stop short)")
    ap.add_argument("--tokens", type=positive, default=64, help="N: runs of N and 2N new tokens")
    ap.add_argument("--repeats", type=positive, default=5)
    ap.add_argument("--threads", type=positive, default=1)
    ap.add_argument("--batch", type=positive, default=1)
    ap.add_argument("--json", default=None, help="also write the figures here as JSON")
    a = ap.parse_args()
    refuse_outputs("host_cost.py", {"--json": a.json}, [])  # before minutes of measuring
    torch.set_num_threads(a.threads)
    systems = Systems(a)
    # the longer run, and a K = 4 round's rows past its last token, within the tiny model's positions
    room = systems.target.config.max_position_embeddings - systems.ids.shape[1] - 4
    if 2 * a.tokens > room:
        raise SystemExit(
            f"host_cost.py: --tokens {a.tokens}: a run of {2 * a.tokens} new tokens does not fit the tiny model's "
            f"{systems.target.config.max_position_embeddings} positions after its prompt; at most {room // 2}"
        )
    names = [n for pair in PAIRS for n in pair]
    for name in names:  # warm-up: first calls, product forms, generation configs
        systems.run(name, a.tokens)
    host = {n: [] for n in names}
    model = {n: [] for n in names}
    differ = 0
    for rep in range(a.repeats):
        order = names if rep % 2 == 0 else names[::-1]
        outputs = {}
        for name in order:
            short, long = systems.run(name, a.tokens), systems.run(name, 2 * a.tokens)
            rounds = long[2] - short[2]
            host[name].append((long[0] - short[0]) * 1000 / rounds)
            model[name].append((long[1] - short[1]) * 1000 / rounds)
            outputs[name] = long[3]
        differ += sum(outputs[n] != outputs["hf greedy"] for n in names)
    figures = {
        n: {
            "host_ms": statistics.median(host[n]),
            "model_ms": statistics.median(model[n]),
            "round_ms": statistics.median(h + m for h, m in zip(host[n], model[n])),
        }
        for n in names
    }
    ratios = {f"{a_} / {b_}": figures[a_]["host_ms"] / figures[b_]["host_ms"] for a_, b_ in PAIRS}
    # specd's own code inside a model call (its product forms, its K/V store) counts as model time
    # above: the whole round's ratio shows it
    whole = {f"{a_} / {b_}": figures[a_]["round_ms"] / figures[b_]["round_ms"] for a_, b_ in PAIRS}
    print(
        f"tiny Llama: {a.layers} layers, d = {a.hidden}, V = {len(systems.tokenizer)}; batch {a.batch}, "
        f"{a.threads} thread(s), "
        f"runs of {a.tokens} and {2 * a.tokens} tokens, {a.repeats} repeats; outputs unlike HF greedy's: {differ}"
    )
    print(f"{'system':20s} {'host ms/round':>14s} {'model ms/round':>15s} {'round ms':>9s}")
    for n in names:
        f = figures[n]
        print(f"{n:20s} {f['host_ms']:14.3f} {f['model_ms']:15.3f} {f['round_ms']:9.3f}")
    for label, ratio in ratios.items():
        print(f"host time a round, {label}: {ratio:.2f}x")
    for label, ratio in whole.items():
        print(f"whole round (host + model), {label}: {ratio:.2f}x")
    if a.json:
        doc = {
            "args": vars(a),
            "figures": figures,
            "ratios": ratios,
            "whole_round_ratios": whole,
            "outputs_unlike_hf_greedy": differ,
        }
        write_text_atomic(a.json, json.dumps(doc, indent=1) + "\n", "JSON file")
    return 0 if differ == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
