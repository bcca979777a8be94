"""Measured mode: time T_D, T_V and the baseline step on the real device, measure
the acceptance profile from real generation, then put the ledger's predicted
speedup beside the speedup measured by actually generating at each (K, B), and at
each (tree, B): its verification over nodes + 1 rows and its draft calls over the
rows of its levels timed, its acceptance by depth and rank measured from a run of the
widest tree swept (with the chain run's rank 0)."""

from __future__ import annotations

import dataclasses
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

from specd.core.model import RowInput, device_sync
from specd.core.state import History
from specd.core.tree_shape import TreeShape
from specd.errors import UsageError, shown
from specd.models.model_facts import cache_shape
from specd.models.run.distributed import actors, connect
from specd.models.run.pipeline import Pipeline
from specd.models.run.prompts import PromptItem
from specd.policy.autok import request_tree_profile
from specd.policy.ledger import MeasuredCosts
from specd.policy.profile import AcceptanceProfile, profile_from_rates
from specd.policy.trees import TreeProfile, level_rows
from specd.sweeps.ledger import LedgerRow, ModelShape, Trees, sweep

MAX_MEASURED_BATCH = 256  # a measured cell generates a real batch of this many prompts at every K
MAX_REPEATS = 100


def check_repeats(repeats: int) -> None:
    if isinstance(repeats, bool) or not isinstance(repeats, int) or not 1 <= repeats <= MAX_REPEATS:
        raise UsageError(f"--repeats must be in 1..{MAX_REPEATS}, got {shown(repeats)}")


MEASURE_PROMPTS = (
    "What are three good habits for staying healthy?",
    "Write a short story about a robot who learns to paint.",
    "Write a Python function that checks whether a string is a palindrome.",
    "Rewrite this text in a formal tone: hey guys, the meeting got moved to friday, dont be late ok",
    "Explain in two sentences why the sky is blue.",
    "Tell a bedtime story about a brave little turtle.",
    "Write a Python function that returns the n-th Fibonacci number.",
    "Rewrite this text more concisely: we will most likely have to postpone the picnic if it rains.",
)


@dataclass(frozen=True)
class MeasuredSweep:
    profile: AcceptanceProfile
    costs: MeasuredCosts
    rows: list[LedgerRow]
    measured: dict  # (k, batch) -> measured speedup ((tree spec, batch) for a tree)
    seconds_per_target_step: float  # T(1) in seconds: the unit of every cost
    progress: dict = dataclasses.field(default_factory=dict)  # the same keys -> measured tokens per round


def _timed(fn: Callable[[], None], device: torch.device, warmup: int, repeats: int) -> float:
    for _ in range(warmup):
        fn()
    sync = device_sync(device) or (lambda: None)  # on CUDA the device in use, not the current one
    times = []
    for _ in range(repeats):
        sync()
        t = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def scratch_cache(lm, batch: int, context: int):
    """A cache of its own for ``batch`` requests, each holding ``context`` committed rows."""
    cache = lm.new_cache()
    prefix = tuple((7 * i + 3) % max(lm.vocab_size - 1, 2) for i in range(context))
    for b in range(batch):
        cache.open(b)
    lm.step(cache, [RowInput(b, prefix, tuple(range(context))) for b in range(batch)], logits_for=0)
    for b in range(batch):
        cache.commit(b, context)
    return cache


def time_call(lm, batch: int, context: int, rows: int, device, warmup: int, repeats: int) -> float:
    """Seconds for one call feeding ``rows`` tokens to each of ``batch`` requests at ``context``."""
    cache = scratch_cache(lm, batch, context)
    tokens = tuple(range(5, 5 + rows))

    def call():
        lm.step(cache, [RowInput(b, tokens, tuple(range(context, context + rows))) for b in range(batch)])
        for b in range(batch):
            cache.discard(b)

    return _timed(call, device, warmup, repeats)


def time_shared(source, batch: int, context: int, head_rows: int, device, warmup: int, repeats: int) -> float:
    """A shared-body draft's calls (specd.core.shared_body), ``batch`` requests at ``context``: a body
    step of one token each, then its restricted head (``head_rows`` 0: a draft step) or the full head
    over ``head_rows`` rows each (a verification of K = head_rows - 1 drafts)."""
    lm = source.model
    cache = scratch_cache(lm, batch, context)

    def call():
        out = lm.body_step(cache, [RowInput(b, (5,), (context,)) for b in range(batch)], logits_for=1)
        hidden = torch.cat(out.hidden)
        if head_rows:
            lm.head_logits(hidden.repeat_interleave(head_rows, dim=0))
        else:
            source.small_head(hidden)
        for b in range(batch):
            cache.discard(b)

    return _timed(call, device, warmup, repeats)


def shared_source(pipe: Pipeline):
    """The run's first model source when it is a shared-body draft, else None."""
    models = [s for s in pipe.proposer.sources if hasattr(s, "model")]
    return models[0] if models and models[0].shares_target_cache else None


@dataclass(frozen=True)
class BatchTimes:
    """Timings at one batch size, all on one worker, in units of that worker's batch-1 target step."""

    unit: float  # seconds of one target decode step at batch 1
    baseline: float  # one target decode step at this batch size
    draft_step: float  # one draft step at this batch size
    base_time_per_token: float  # seconds per token of target-only generation at this batch size


def time_batch(pipe: Pipeline, b: int, context: int, texts, max_new_tokens: int, warmup: int, repeats: int):
    unit = time_call(pipe.target, 1, context, 1, pipe.device, warmup, repeats)
    models = pipe.proposer.models
    draft_lm = models[0] if models else None  # a lookup costs no model step
    shared = shared_source(pipe)
    if shared is not None:
        draft = time_shared(shared, b, context, 0, pipe.device, warmup, repeats) / unit
    else:
        draft = time_call(draft_lm, b, context, 1, pipe.device, warmup, repeats) / unit if draft_lm is not None else 0.0
    base = pipe.run(_batch_items(texts, b), baseline=True, max_new_tokens=max_new_tokens, record_log=False).stats
    return BatchTimes(
        unit,
        time_call(pipe.target, b, context, 1, pipe.device, warmup, repeats) / unit,
        draft,
        base.decode_time / base.emitted,
    )


def time_cell(
    pipe: Pipeline,
    k: int | str | TreeShape,
    b: int,
    context: int,
    texts,
    max_new_tokens: int,
    warmup: int,
    repeats: int,
    batch: BatchTimes | None = None,
) -> tuple:
    """One (K, B) or (tree, B) cell: -> (the batch's timings, the verification call in units (None for
    K = auto), the measured speedup, the measured tokens per round, a tree's draft calls in units by
    their rows). Without ``batch`` it is timed here too, so a cell run on its own worker is normalized
    there. A tree's verification is timed as a call of its nodes + 1 rows (the tree mask aside)."""
    batch = batch or time_batch(pipe, b, context, texts, max_new_tokens, warmup, repeats)
    shared = shared_source(pipe)
    tree = k if isinstance(k, TreeShape) else None
    rows = tree.size + 1 if tree is not None else None if k == "auto" else k + 1
    drafts = {}
    if rows is None:
        verify = None
    elif shared is not None:  # a body step of the last draft and the full head over the K + 1 staged rows
        verify = time_shared(shared, b, context, rows, pipe.device, warmup, repeats) / batch.unit
    else:
        verify = time_call(pipe.target, b, context, rows, pipe.device, warmup, repeats) / batch.unit
    if tree is not None:
        wide = {w for w in level_rows(tree) if w > 1}
        drafts = {w * b: time_call(pipe.proposer.models[0], b, context, w, pipe.device, warmup, repeats) for w in wide}
        drafts = {rows_: seconds / batch.unit for rows_, seconds in drafts.items()}
        pipe = pipe.with_options(dataclasses.replace(pipe.options, tree=tree.spec))
    run = pipe.run(
        _batch_items(texts, b), k=k if tree is None else "auto", max_new_tokens=max_new_tokens, record_log=False
    )
    spec = run.stats
    return (
        batch,
        verify,
        batch.base_time_per_token / (spec.decode_time / spec.emitted),
        spec.emitted / spec.rounds,
        drafts,
    )


def _batch_items(texts, b: int) -> list[PromptItem]:
    return [PromptItem(f"b{i}", texts[i % len(texts)]) for i in range(b)]


def measure(
    pipe: Pipeline,
    ks: list[int],
    batches: list[int],
    prompts: list[str] | None = None,
    max_new_tokens: int = 32,
    warmup: int = 2,
    repeats: int = 5,
    progress: Callable[[str], None] | None = None,
    ray_address: str | None = None,
    trees: tuple[TreeShape, ...] = (),
) -> MeasuredSweep:
    """The acceptance profile from a run at the largest K (and with ``trees``, by depth and rank from a
    run of the widest of them), then every (K, B) and (tree, B) cell timed and generated. With
    ``ray_address``, each cell is one task on a Ray actor, timed and normalized on its own worker."""
    check_repeats(repeats)
    if pipe.context is not None and max_new_tokens >= pipe.context // 2:
        raise UsageError(
            f"--max-new-tokens {max_new_tokens} is too long to measure with a model that reads "
            f"{pipe.context} positions; use at most {pipe.context // 2 - 1}"
        )
    say = progress or (lambda _msg: None)
    texts = list(prompts or MEASURE_PROMPTS)
    items = [PromptItem(f"m{i}", t) for i, t in enumerate(texts)]
    context = int(statistics.mean(len(pipe.encode(it)) for it in items)) + max_new_tokens // 2
    say(f"acceptance profile from {len(items)} prompts at K = {max(ks)}")
    run = pipe.run(items, k=max(ks), max_new_tokens=max_new_tokens, record_log=False)
    profile = profile_from_rates(run.stats.figures()["acceptance_by_position"], max(ks), "measured")
    state_per_round = run.stats.state_time / max(run.stats.rounds, 1)
    found = (
        Trees(measured_tree_profile(pipe, items, run, trees, max(ks), max_new_tokens, say), trees) if trees else None
    )
    args = (context, texts, max_new_tokens, warmup, repeats)
    cells: dict[tuple, tuple] = {}
    ledger = (pipe, profile, cells, ks, batches, context, state_per_round, found)
    try:
        if ray_address is not None:
            cells.update(_cells_on_ray(pipe, [*ks, *trees], batches, args, ray_address, say))
        else:
            for b in batches:
                say(f"timing target and draft calls at batch {b}")
                batch = time_batch(pipe, b, *args)
                for k in [*ks, "auto", *trees]:
                    say(f"generating at {f'tree {k.spec}' if isinstance(k, TreeShape) else f'K = {k}'}, batch {b}")
                    cells[(k.spec if isinstance(k, TreeShape) else k, b)] = time_cell(pipe, k, b, *args, batch=batch)
    except KeyboardInterrupt:
        raise MeasureInterrupted(_ledger(*ledger)) from None
    return _ledger(*ledger)


def measured_tree_profile(pipe: Pipeline, items, chain_run, trees, k: int, max_new_tokens: int, say) -> TreeProfile:
    """The acceptance by depth and rank of the chain run's rounds and a run of the widest tree swept, as
    -k auto reads one request's (``request_tree_profile``; a cell neither tested takes its prior)."""
    widest = max(trees, key=lambda t: t.size)
    say(f"acceptance by depth and rank from {len(items)} prompts with the tree {widest.spec}")
    tree_pipe = pipe.with_options(dataclasses.replace(pipe.options, tree=widest.spec))
    tree_run = tree_pipe.run(items, k="auto", max_new_tokens=max_new_tokens, record_log=False)
    counts: dict[tuple[int, int], tuple[int, int]] = {}
    for result in (*chain_run.results, *tree_run.results):
        for j, row in enumerate(result.history.ranks):
            for r, (n, a) in enumerate(row):
                was = counts.get((j, r), (0, 0))
                counts[(j, r)] = (was[0] + n, was[1] + a)
    table = tuple(
        tuple(counts.get((j, r), (0, 0)) for r in range(1 + max((r for i, r in counts if i == j), default=-1)))
        for j in range(1 + max((j for j, _ in counts), default=-1))
    )
    depth = max([k, *(t.depth for t in trees)])
    ranks = max(t.size for t in trees)
    return dataclasses.replace(request_tree_profile(History(ranks=table), depth, ranks), source="measured")


class MeasureInterrupted(KeyboardInterrupt):
    """Ctrl-C (or SIGTERM) during a measured sweep: ``partial`` is the ledger over the cells measured
    so far (None before the first), so a caller can keep them."""

    def __init__(self, partial: MeasuredSweep | None):
        super().__init__()
        self.partial = partial


def _ledger(pipe: Pipeline, profile, cells: dict, ks, batches, context: int, state_per_round: float, trees=None):
    """The measured costs and the ledger's rows over the cells measured: every batch size with at
    least one fixed-K cell, at the K (and trees) measured there. None when no cell is."""
    done = [b for b in batches if any((k, b) in cells for k in ks)]
    if not done:
        return None
    first = {b: next(cells[(k, b)][0] for k in ks if (k, b) in cells) for b in done}
    unit = first[done[0]].unit
    spec_nodes = {t.spec: t.size for t in (trees.shapes if trees else ())}
    verify = {(spec_nodes.get(k, k), b): cell[1] for (k, b), cell in cells.items() if cell[1] is not None}
    verify.update({(0, b): first[b].baseline for b in done})  # K = 0 (auto's target-only step)
    drafts = {rows: seconds for cell in cells.values() for rows, seconds in cell[4].items()}
    costs = MeasuredCosts(
        {b: first[b].draft_step for b in done},
        verify,
        {b: first[b].baseline for b in done},
        state_cost=state_per_round / unit,
        draft_curve=drafts.__getitem__,  # a tree's draft calls, by their rows, as timed
    )
    shape = ModelShape(*cache_shape(pipe.target))
    rows = []
    for b in done:  # the best K is marked per batch size, so batch by batch is the same ledger
        mine = [k for k in ks if (k, b) in cells]
        timed = trees and dataclasses.replace(trees, shapes=tuple(t for t in trees.shapes if (t.spec, b) in cells))
        rows += sweep(profile, costs, mine, [b], context, shape=shape, auto=True, trees=timed or None)
    return MeasuredSweep(
        profile,
        costs,
        rows,
        {kb: cell[2] for kb, cell in cells.items()},
        unit,
        {kb: cell[3] for kb, cell in cells.items()},
    )


def _cells_on_ray(pipe: Pipeline, ks, batches, args, address: str, say) -> dict:
    """One task per (K, B) or (tree, B) cell on the cluster's actors, each timed on the worker that runs it."""
    ray = connect(address)
    _, pool = actors(ray, pipe.options, baseline=False)
    say(f"{len(ks) * len(batches)} cells on {len(pool)} Ray actors")
    refs = {}
    for i, (k, b) in enumerate((k, b) for b in batches for k in [*ks, "auto"]):
        key = (k.spec if isinstance(k, TreeShape) else k, b)
        refs[key] = pool[i % len(pool)].call.remote(time_cell, k, b, *args)
    return dict(zip(refs, ray.get(list(refs.values()))))
