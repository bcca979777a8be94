"""Tokens per round, chain against tree at the same node budget, on the held-out corpus: hardware-free.

    python benchmarks/tree_rounds.py [--half test] [--pairs smollm,gemma,weak] [--temperatures 0,0.7]
                                     [--budgets 4,8,16] [--max-new-tokens 64] [--engine N] [--dynamic]
                                     [--row-costs FILE --draft-costs 0.9,0.9,0.9] [--json FILE]

Pairs: ``smollm`` is embedded SmolLM2-135M with its default model draft (``self:bf16``; its lookup
drafts continuations, not shapes, and is left out); ``gemma`` is embedded Gemma 3 270M with an
early exit of 12 of its 18 layers (``self:layers=12``: its default draft, ``self:vocab=N``, drafts
into the target's cache and so drafts chains only); ``weak`` is SmolLM2 with ``self:layers=26``, a
draft whose acceptance per position is about 0.5. Temperatures: 0 (greedy) and 0.7 (top-k 50)
under the default rule (invariant).

How it counts, without timing anything. Under the invariant rule (greedy is its temperature-0
case) every emitted token is the target's own, so a request's text is target-only decoding's
whatever the draft and the shape. A round from output position t walks its tree: at depth j it
stands on a node whose path is the text up to t + j - 1, and the child equal to the target's
token x_{t+j-1} is accepted if there is one. The draft's children there are its first w tokens in
its own order at that position with the text as prefix (greedy: its processed logits, ties to the
lower id; sampled: log q + G_t, the Gumbel-top-w under the shared noise), so one teacher-forced
draft call per prompt gives, at every position, the rank of the target's token in the draft's
order, and every static shape is replayed exactly from it: accepted at depth j iff that rank is
below the number of children there. ``-k auto`` is replayed by the real policy (``AutoK``, its
``History`` kept as the engine keeps it) at costs where rows and drafts are free (``auto``: the
tree of largest predicted E[A] within the budget, or the chain) or, with ``--row-costs``, at a
machine's curve (``auto@curve``). ``fit tree``: the best static tree for the budget under the
acceptance by depth and rank pooled over the fit half's prompts (chosen on the fit half, counted on
this one). ``--engine N`` runs the engine itself on the first N prompts for the chain and the fit
tree and prints both counts (the replay's check: they must agree up to the draft's rounding, a
teacher-forced call and the engine's cached calls are not bit-identical); ``--dynamic`` adds the
dynamic tree (``nodes=N``, EAGLE-2's rule), which only the engine can count (its nodes off the text
depend on the draft's rows there).

Tokens per round: emitted tokens / rounds over every prompt of the half (the correction or bonus
counted; a budget's last round included). Not a test: it measures.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from arguments import positive, positives  # noqa: E402
from heldout import TARGETS, load_half, refuse_outputs  # noqa: E402

from specd.core.engine import EngineConfig, SpeculativeEngine  # noqa: E402
from specd.core.gumbel import request_key, uniforms  # noqa: E402
from specd.core.model import RowInput  # noqa: E402
from specd.core.sources import Offer  # noqa: E402
from specd.core.state import History  # noqa: E402
from specd.core.tree_shape import TreeShape, parse_tree  # noqa: E402
from specd.files import write_text_atomic  # noqa: E402
from specd.models.run.options import GenerateOptions  # noqa: E402
from specd.models.run.pipeline import Pipeline  # noqa: E402
from specd.policy.autok import SIBLING_FIRST, SIBLING_POWER, AutoK  # noqa: E402
from specd.policy.costs import FixedCosts  # noqa: E402
from specd.policy.ledger import CostModel  # noqa: E402
from specd.policy.row_costs import read_row_costs  # noqa: E402
from specd.policy.trees import TreeProfile, best_trees, shape_spec  # noqa: E402

PAIRS = {
    "smollm": ("smollm", "self:bf16"),
    "gemma": ("gemma", "self:layers=12"),
    "weak": ("smollm", "self:layers=26"),
}
NEVER = 1 << 30  # the rank of a token the draft gives no mass (never a child)
SOURCE = "draft"
FREE = FixedCosts(CostModel(draft_cost=0.0, row_cost=0.0, draft_row_cost=0.0, state_cost=0.0))


@dataclasses.dataclass(frozen=True)
class Text:
    """One prompt's target text and, per position, the rank of its token in the draft's order."""

    request_id: str
    tokens: tuple[int, ...]
    ranks: tuple[int, ...]


def pipeline(pair: str, temperature: float, max_new: int) -> Pipeline:
    model, draft = PAIRS[pair]
    sampling = {"temperature": temperature} | ({"top_k": 50} if temperature else {})
    return Pipeline.build(GenerateOptions(target=TARGETS[model], draft=draft, max_new_tokens=max_new, **sampling))


def within_context(pipe: Pipeline, items, max_new: int):
    limit = pipe.context
    return [it for it in items if limit is None or len(pipe.encode(it)) + max_new <= limit]


def texts(pipe: Pipeline, items, max_new: int, batch: int) -> list[Text]:
    """Target-only text of every prompt (the speculative text under the invariant rule), and the draft's
    rank of each of its tokens (module docstring)."""
    run = pipe.run(items, baseline=True, max_new_tokens=max_new, record_log=False, batch_size=batch)
    lm, policy = pipe.proposer.sources[0].model, pipe.draft_policy
    out = []
    for item, result in zip(items, run.results):
        prompt, tokens = pipe.encode(item), tuple(result.tokens)
        out.append(
            Text(item.request_id, tokens, ranks_of(lm, policy, prompt, tokens, item.request_id, pipe.options.seed))
        )
    return out


@torch.no_grad()
def ranks_of(lm, policy, prompt, tokens, request_id: str, seed: int) -> tuple[int, ...]:
    """Per position t of ``tokens``: how many tokens come before tokens[t] in the draft's order there."""
    if not tokens:
        return ()
    seq = (*prompt, *tokens[:-1])
    cache = lm.new_cache()
    cache.open(0)
    raw = lm.step(cache, [RowInput(0, seq, tuple(range(len(seq))))], logits_for=len(tokens)).logits[0].float()
    cache.close(0)
    states, state = [], policy.initial_state(prompt)
    for t in tokens:
        states.append(state)
        state = state.advance(t)
    x = torch.tensor(tokens)
    rows = torch.arange(len(tokens))
    if policy.greedy:
        scores = policy.logits(raw, states).double()
        mine = scores[rows, x].unsqueeze(1)
        ids = torch.arange(scores.shape[1]).unsqueeze(0)
        ranks = (scores > mine).sum(1) + ((scores == mine) & (ids < x.unsqueeze(1))).sum(1)
        return tuple(int(r) for r in ranks)
    q = policy.probabilities(raw, states, check=False).double()
    noise = uniforms(request_key(seed, request_id), rows, q.shape[1])
    scores = torch.where(q > 0, q.log(), float("-inf")) - noise.log().neg().log()
    mine = scores[rows, x].unsqueeze(1)
    ranks = (scores > mine).sum(1)
    return tuple(int(r) if q[i, t] > 0 else NEVER for i, (r, t) in enumerate(zip(ranks, tokens)))


def walk(children_of, ranks, at: int) -> tuple[int, tuple[tuple[int, bool], ...]]:
    """A round from position ``at`` of the tree whose node at rank path p has ``children_of(p)``
    children: (accepted, its walk: per level, children tested and whether the last passed;
    specd.core.outcome.RoundOutcome.walk)."""
    path: tuple[int, ...] = ()
    record = []
    while (children := children_of(path)) > 0:
        r = ranks[at + len(path)] if at + len(path) < len(ranks) else NEVER
        if r >= children:
            record.append((children, False))
            break
        record.append((r + 1, True))
        path += (r,)
    return len(path), tuple(record)


class Replayed:
    """What a replayed request reads and keeps (AutoK reads history, remaining and the draft budget)."""

    def __init__(self, budget: int):
        self.history, self.budget, self.at = History(), budget, 0
        self.output = ()

    @property
    def remaining(self) -> int:
        return self.budget - self.at

    @property
    def draft_budget(self) -> int:
        return max(0, self.remaining - 1)


def replay(text: Text, budget: int, plan) -> tuple[int, int, int]:
    """Decode ``text`` again round by round, ``plan(state) -> (k, shape or None)`` choosing each round's
    drafts -> (rounds, emitted tokens, rounds that drafted a tree)."""
    state, rounds, trees = Replayed(budget), 0, 0
    while state.at < len(text.tokens):
        k, shape = plan(state)
        k = min(k, state.draft_budget)
        if shape is not None and k:
            shape = shape.cut(k)
            k = shape.depth
        if k == 0:
            accepted, record = 0, ()
            state.history = state.history.after(0, 0)
        elif shape is None or shape.is_chain:
            accepted, _ = walk(lambda p, k=k: int(len(p) < k), text.ranks, state.at)
            state.history = state.history.after(k, accepted, SOURCE)
        else:
            accepted, record = walk(shape.children, text.ranks, state.at)
            state.history = state.history.after(len(record), accepted, SOURCE, walk=record)
            trees += 1
        state.at = min(state.at + accepted + 1, len(text.tokens))
        rounds += 1
    return rounds, len(text.tokens), trees


def fixed(shape: TreeShape):
    return lambda state: (shape.depth, shape)


def auto(budget: int, costs, greedy: bool):
    policy = AutoK(budget, 1, costs, greedy=greedy, tree_budget=budget)

    def plan(state):
        p = policy.plan(state, [Offer(0, SOURCE)])
        return p.k, p.shape

    return plan


def pooled_profile(all_texts: list[Text], depth: int, width: int) -> TreeProfile:
    """beta by depth and rank pooled over ``all_texts``: each replayed with a tree of ``width`` children
    at every node, ``depth`` deep (only the path along the text is walked, so it costs nothing)."""

    def wide(path):
        return width if len(path) < depth else 0

    tested: dict[tuple[int, int], list[int]] = {}
    for text in all_texts:
        at = 0
        while at < len(text.tokens):
            accepted, record = walk(wide, text.ranks, at)
            for j, (n, passed) in enumerate(record):
                for r in range(n):
                    cell = tested.setdefault((j, r), [0, 0])
                    cell[0] += 1
                    cell[1] += int(passed and r == n - 1)
            at += accepted + 1
    betas = tuple(
        tuple(tested[(j, r)][1] / tested[(j, r)][0] if tested.get((j, r), [0])[0] else 0.0 for r in range(width))
        for j in range(depth)
    )
    return TreeProfile(betas, "fit half, pooled")


def rank_tests(text: Text, width: int = 16) -> dict[int, list[int]]:
    """rank -> [tested, kept] over one text replayed with ``width`` children at every node (what a
    request's later siblings would have shown: rank r tested where ranks 0..r-1 were refused)."""
    counts: dict[int, list[int]] = {}
    at = 0
    while at < len(text.tokens):
        accepted, record = walk(lambda path: width if len(path) < width else 0, text.ranks, at)
        for n, passed in record:
            for r in range(n):
                cell = counts.setdefault(r, [0, 0])
                cell[0] += 1
                cell[1] += int(passed and r == n - 1)
        at += accepted + 1
    return counts


def rank_law_loglik(per_prompt: list[dict], first: float, power: float) -> tuple[float, int]:
    """(log-likelihood, tests) of the later siblings' tests under the prior -k auto starts from: rank
    r >= 1 kept at first r^-power times the prompt's pooled rank-0 rate (Beta(1, 1))."""
    total, tests = 0.0, 0
    for counts in per_prompt:
        n0, a0 = counts.get(0, [0, 0])
        pooled = (a0 + 1) / (n0 + 2)
        for r, (n, a) in counts.items():
            if r == 0:
                continue
            p = min(max(first * pooled * r**-power, 1e-9), 1 - 1e-9)
            total += a * math.log(p) + (n - a) * math.log(1 - p)
            tests += n
    return total, tests


def fit_rank_law(halves: dict[str, dict[str, list[Text]]]) -> None:
    """Print the maximum-likelihood (SIBLING_FIRST, SIBLING_POWER) on the fit half, per pair and
    temperature and over all, and each one's log-likelihood per test on the test half (held out)."""
    grid = [(f / 100, p / 20) for f in range(5, 100) for p in range(0, 41)]
    pooled = {"fit": [], "test": []}
    for key in halves["fit"]:
        per = {half: [rank_tests(t) for t in halves[half][key]] for half in ("fit", "test") if key in halves[half]}
        for half, counts in per.items():
            pooled[half] += counts
        best = max(grid, key=lambda fp: rank_law_loglik(per["fit"], *fp)[0])
        shown = [f"{half} {rank_law_loglik(c, *best)[0] / rank_law_loglik(c, *best)[1]:.4f}" for half, c in per.items()]
        print(f"  {key}: first {best[0]:.2f}, power {best[1]:.2f}; log-likelihood per test {', '.join(shown)}")
    best = max(grid, key=lambda fp: rank_law_loglik(pooled["fit"], *fp)[0])
    for half, counts in pooled.items():
        if counts:
            ll, n = rank_law_loglik(counts, *best)
            print(f"  all ({half} half, {n} tests): first {best[0]:.2f}, power {best[1]:.2f}: {ll / n:.4f} per test")
    print(f"  in use: SIBLING_FIRST {SIBLING_FIRST}, SIBLING_POWER {SIBLING_POWER}")


def engine_rounds(pipe: Pipeline, items, max_new: int, shape: TreeShape | None, k: int, policy=None, batch: int = 8):
    """The engine's own (rounds, emitted tokens, tree rounds) over ``items`` with ``shape`` (or ``policy``)."""
    # record_log: the commits (which rounds drafted a tree) are kept only with the log
    config = EngineConfig(k=k, eos_ids=pipe.eos_ids, rule=pipe.options.rule, tree=shape, record_log=True)
    engine = SpeculativeEngine(pipe.target, pipe.proposer, pipe.target_policy, config, k_policy=policy)
    requests, _ = pipe.requests(items, max_new)
    result = engine.run(requests, batch_size=batch)
    rounds = sum(len(s.history.k_schedule) for s in result.states)
    emitted = sum(len(s.new_tokens) for s in result.states)
    return rounds, emitted, sum(1 for o in result.commits if o.draft_parents is not None)


def total(results) -> tuple[int, int, int]:
    return tuple(sum(r[i] for r in results) for i in range(3))


def load_texts(pipe: Pipeline, items, args, key: str) -> list[Text]:
    """``texts``, kept in ``--cache`` (one JSON file per pair, temperature, half and budget) when given."""
    path = Path(args.cache) / f"{key}.json" if args.cache else None
    if path is not None and path.is_file():
        return [Text(d["id"], tuple(d["tokens"]), tuple(d["ranks"])) for d in json.loads(path.read_text())]
    started = time.perf_counter()
    out = texts(pipe, items, args.max_new_tokens, args.batch)
    print(f"  {key}: {len(out)} texts and draft ranks in {time.perf_counter() - started:.0f} s", flush=True)
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(
            path, json.dumps([{"id": t.request_id, "tokens": t.tokens, "ranks": t.ranks} for t in out]), "cache"
        )
    return out


def cell(pipe, test: list[Text], fit: list[Text], n: int, greedy: bool, args, items) -> dict:
    """Every system's tokens per round at node budget ``n`` (module docstring)."""
    chain = TreeShape.chain(n)
    fit_tree = best_trees(pooled_profile(fit, n, n), n, n)[-1].shape
    row = {"budget": n, "fit_tree": shape_spec(fit_tree.choices), "fit_tree_nodes": fit_tree.size}
    plans = {"chain": fixed(chain), "fit tree": fixed(fit_tree), "auto": auto(n, FREE, greedy)}
    if args.row_costs:
        plans["auto@curve"] = auto(n, args.curve_costs[args.pair_index], greedy)
    for name, plan in plans.items():
        rounds, emitted, trees = total([replay(t, args.max_new_tokens, plan) for t in test])
        row[name] = {"tokens_per_round": emitted / rounds, "rounds": rounds, "emitted": emitted, "tree_rounds": trees}
    if args.engine:
        few = items[: args.engine]
        ids = {it.request_id for it in few}
        checks = {
            "chain": (chain, None),
            "fit tree": (fit_tree, None),
            "auto": (None, AutoK(n, 1, FREE, greedy=greedy, tree_budget=n)),
        }
        for name, (shape, policy) in checks.items():
            rounds, emitted, trees = engine_rounds(
                pipe, few, args.max_new_tokens, shape, shape.depth if shape else 0, policy
            )
            plan = fixed(shape) if shape is not None else auto(n, FREE, greedy)
            again = total([replay(t, args.max_new_tokens, plan) for t in test if t.request_id in ids])
            row[name]["engine_check"] = {
                "engine": emitted / rounds,
                "replay": again[1] / again[0],
                "engine_trees": trees,
                "replay_trees": again[2],
                "prompts": len(few),
            }
    if args.dynamic:
        dynamic = parse_tree(f"nodes={n}")
        rounds, emitted, trees = engine_rounds(pipe, items, args.max_new_tokens, dynamic, dynamic.depth)
        row["dynamic"] = {
            "tokens_per_round": emitted / rounds,
            "rounds": rounds,
            "emitted": emitted,
            "tree_rounds": trees,
        }
    return row


def show(pair: str, temperature: float, row: dict) -> None:
    base = row["chain"]["tokens_per_round"]
    parts = []
    for name in ("chain", "fit tree", "dynamic", "auto", "auto@curve"):
        if name in row:
            r = row[name]
            check = r.get("engine_check")
            extra = (
                f" (engine {check['engine']:.3f} / replay {check['replay']:.3f} on {check.get('prompts', '')} prompts)"
                if check
                else ""
            )
            share = f", {r['tree_rounds'] / r['rounds']:.0%} trees" if name.startswith("auto") else ""
            parts.append(f"{name} {r['tokens_per_round']:.3f} = {r['tokens_per_round'] / base:.3f}x{share}{extra}")
    print(f"{pair:6} T={temperature:<3} N={row['budget']:<2} " + " | ".join(parts), flush=True)
    print(f"{'':6} fit tree ({row['fit_tree_nodes']} nodes): {row['fit_tree']}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--half", default="test", choices=("test", "fit"))
    parser.add_argument("--pairs", default="smollm,gemma,weak")
    parser.add_argument("--temperatures", default="0,0.7")
    parser.add_argument("--budgets", type=positives, default=[4, 8, 16])
    parser.add_argument("--max-new-tokens", type=positive, default=64)
    parser.add_argument("--per-kind", type=positive, default=None, help="the first N prompts of each kind")
    parser.add_argument("--batch", type=positive, default=16, help="requests decoded together (target-only texts)")
    parser.add_argument("--engine", type=int, default=0, help="also count the first N prompts with the engine")
    parser.add_argument("--dynamic", action="store_true", help="also count nodes=N with the engine (slow)")
    parser.add_argument("--row-costs", default=None, help="also replay -k auto at this machine's curve")
    parser.add_argument("--draft-costs", default=None, help="per pair: a draft call / a target call of as many rows")
    parser.add_argument("--threads", type=positive, default=2)
    parser.add_argument("--cache", default=None, help="a folder keeping texts and ranks between runs")
    parser.add_argument("--fit", action="store_true", help="fit -k auto's prior by rank on the fit half and stop")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    pairs = [p for p in args.pairs.split(",") if p]
    if any(p not in PAIRS for p in pairs):
        parser.error(f"--pairs: choose from {', '.join(PAIRS)}")
    temperatures = [float(t) for t in args.temperatures.split(",") if t]
    refuse_outputs("tree_rounds.py", {"--json": args.json, "--cache folder": args.cache})
    if args.row_costs:
        curve = read_row_costs(args.row_costs)
        costs = [float(c) for c in (args.draft_costs or "").split(",") if c]
        if len(costs) != len(pairs):
            parser.error("--row-costs needs --draft-costs, one per pair")
        args.curve_costs = [curve.costs(c) for c in costs]
    torch.set_num_threads(args.threads)
    report, halves = [], {"fit": {}, "test": {}}
    for i, pair in enumerate(pairs):
        args.pair_index = i
        base = pipeline(pair, 0.0, args.max_new_tokens)
        for temperature in temperatures:
            sampling = {"temperature": temperature} | ({"top_k": 50} if temperature else {"top_k": None})
            pipe = base.with_options(dataclasses.replace(base.options, **sampling))
            items = within_context(pipe, load_half(args.half, args.per_kind), args.max_new_tokens)
            fit_items = within_context(pipe, load_half("fit", args.per_kind), args.max_new_tokens)
            key = f"{pair}-{temperature}-{args.max_new_tokens}"
            test = load_texts(pipe, items, args, f"{key}-{args.half}-{args.per_kind}")
            fit = load_texts(pipe, fit_items, args, f"{key}-fit-{args.per_kind}")
            halves["fit"][f"{pair} T={temperature}"], halves["test"][f"{pair} T={temperature}"] = fit, test
            if args.fit:
                continue
            for n in args.budgets:
                row = cell(pipe, test, fit, n, temperature == 0, args, items)
                show(pair, temperature, row)
                report.append({"pair": pair, "draft": PAIRS[pair][1], "temperature": temperature, **row})
    if args.fit:
        fit_rank_law(halves)
    if args.json:
        write_text_atomic(args.json, json.dumps(report, indent=1) + "\n", "JSON file")


if __name__ == "__main__":
    main()
