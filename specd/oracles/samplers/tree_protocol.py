"""Tree samplers under test: the protocol any tree verifier is checked through
(``verify-oracle --sampler ... --tree SPEC``), and specd's own tree rule under it.

The protocol. A tree sampler is a callable (a function, or a class built with no arguments whose
instances are callable) deciding one round over a token tree of N nodes and V tokens:

    sampler(tokens, parents, depths, p, q, drawn, u)

    tokens   int64[N]            node n's draft token; nodes in topological order (a parent before
                                 its children), siblings tried in node order
    parents  int64[N]            node n's parent (-1: the root, the committed frontier)
    depths   int64[N]            1 for the root's children, the parent's + 1 otherwise
    p        float64[N + 1, V]   the target's processed rows: row 0 the root's (it scores the root's
                                 children), row n + 1 node n's (it scores node n's children, or
                                 gives the bonus after a node without children)
    q        float64[N + 1, V]   the draft's rows, indexed as p: the row a node's children were
                                 drawn or ranked from; None: they were chosen without one (a lookup)
    drawn    str                 how siblings were drawn: "sampled" (child r from its parent's q
                                 with its r earlier siblings removed, renormalized), "iid" (each
                                 from its parent's q; siblings may repeat), "rank" (the parent's
                                 q's top tokens in rank order, or a lookup's: chosen, not drawn)
    u        Uniforms            the round's uniforms (specd.oracles.samplers.tree_uniforms): u.node(n),
                                 u.terminal(), u.uniform(key), u.draw(row)

It returns ``(path, terminal)``: the accepted nodes from a child of the root down (a sequence or
int64[A] of node indices, each the child of the one before; empty when none is kept), and the
token emitted after them, drawn with the terminal uniform (an int), or the distribution it is
drawn from (float[V], any positive scale). A mapping with keys ``path`` and ``terminal`` works
too. Raising is how a sampler refuses an input (a construction it cannot verify). p and q are
the sampler's own copies: writing into them changes nothing outside the call.
"""

from __future__ import annotations

import inspect
import math
import operator
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from itertools import accumulate

import torch

from specd.core.rows import Rows
from specd.core.sampler import RejectionSampler, Tested
from specd.core.tree import ROOT, DraftTree, TreeBatch
from specd.errors import SamplerFailed, UsageError
from specd.oracles.samplers import tree_published as pub
from specd.oracles.samplers.protocol import is_file_spec, isolated, load_sampler, loading
from specd.oracles.samplers.tree_rounds import TreeRound
from specd.oracles.samplers.tree_uniforms import Uniforms


@dataclass(frozen=True)
class TreeOutcome:
    """What a tree sampler decided in one run: the accepted nodes, and the terminal token (when
    it drew one) or its normalized law."""

    path: tuple[int, ...]
    terminal: int | None
    law: tuple[float, ...] | None


class TreeSamplerUnderTest:
    def __init__(self, name: str, fn: Callable, description: str):
        self.name, self.fn, self.description = name, fn, description

    def __call__(self, rnd: TreeRound, u: Uniforms) -> TreeOutcome:
        """Run the sampler on one round with the stream ``u``: the one place the oracle calls a tree
        sampler's code. Whatever it raises comes back as SamplerFailed; a uniform used as a number is
        named as such. A runner that isolates the sampler in a child process (a time limit per call)
        runs ``tree_checks.round_law(sampler, rnd)`` there, a round in and a dict of floats
        out: the stream calls back into the oracle on every comparison, so it must live beside the
        sampler."""
        tree = rnd.tree
        tokens, parents, depths = rnd.index.clone().unbind()  # the sampler's own copy: it may write into its inputs
        args = (
            tokens,
            parents,
            depths,
            rnd.p.clone(),
            None if rnd.q is None else rnd.q.clone(),
            tree.drawn,
            u,
        )
        with isolated(f"sampler {self.name}"):  # the stream's SamplerFailed (own_randomness, ...) passes as it is
            out = self.fn(*args)
        return normalize_tree_result(self.name, out, tree, rnd.p.shape[-1])

    def ahead(self, rounds: Sequence[TreeRound]) -> None:
        """Work done for a batch of rounds before each is run (nothing, for a sampler the oracle calls
        as given; specd's own rule decides them in batches, ``SpecdTreeRule``)."""


def _fail(name: str, what: str, finding: str):
    raise SamplerFailed(f"tree sampler {name} returned {what}", finding)


def normalize_tree_result(name: str, out, tree: DraftTree, vocab: int) -> TreeOutcome:
    """Whatever form of the protocol the sampler returned -> TreeOutcome, or SamplerFailed naming
    what is wrong: a missing part, a path that is not a path down the tree, a token outside the
    vocabulary, a law that is not finite, non-negative and of positive mass."""
    if (type(out) is tuple or type(out) is list) and len(out) == 2:  # the common form first
        path, terminal = out
    elif isinstance(out, Mapping):
        if "path" not in out or "terminal" not in out:
            _fail(name, "a mapping without 'path' and 'terminal'", "missing_parts")
        path, terminal = out["path"], out["terminal"]
    elif isinstance(out, (tuple, list)) and len(out) == 2:
        path, terminal = out
    else:
        _fail(name, f"{type(out).__name__}; expected (path, terminal)", "returned_wrong_type")
    nodes_list = _node_list(name, path)
    at = ROOT
    for n in nodes_list:
        if not 0 <= n < len(tree) or tree.parents[n] != at:
            _fail(
                name,
                f"path {list(nodes_list)}, not a path down the tree (parents {list(tree.parents)})",
                "path_not_in_tree",
            )
        at = n
    token = _integer_scalar(terminal)
    if token is not None:
        if not 0 <= token < vocab:
            _fail(name, f"terminal token {token} outside 0..{vocab - 1}", "token_out_of_range")
        return TreeOutcome(nodes_list, token, None)
    try:
        law = [float(x) for x in (terminal.reshape(-1).tolist() if isinstance(terminal, torch.Tensor) else terminal)]
    except (TypeError, ValueError, RuntimeError):
        _fail(
            name,
            f"a terminal of type {type(terminal).__name__}; expected a token or a law over V",
            "terminal_shape_wrong",
        )
    if len(law) != vocab:
        _fail(
            name,
            f"a terminal of {len(law)} values; expected a token or a law over {vocab} tokens",
            "terminal_shape_wrong",
        )
    total = sum(law)
    if not all(math.isfinite(x) and x >= 0 for x in law) or not total > 0:
        _fail(name, "a terminal law that is not finite, non-negative and of positive mass", "returned_non_finite_rows")
    return TreeOutcome(nodes_list, None, tuple(x / total for x in law))


def _integer_scalar(value) -> int | None:
    """A terminal given as one token: any integer scalar (an int, a numpy integer, an integer tensor or
    array of one element), as the path's node indices may be; None for anything else (a bool is not a
    token)."""
    if type(value) is int:
        return value
    if isinstance(value, torch.Tensor):
        integer = not (value.is_floating_point() or value.is_complex() or value.dtype == torch.bool)
        return int(value.reshape(-1)[0]) if integer and value.numel() == 1 and not value.is_meta else None
    if isinstance(value, int):
        return None if isinstance(value, bool) else value
    if getattr(getattr(value, "dtype", None), "kind", None) in ("i", "u") and getattr(value, "size", 0) == 1:
        return int(value.reshape(-1)[0])  # numpy's integer scalars and one-element arrays
    return None


def _node_list(name: str, path) -> tuple[int, ...]:
    """A returned path as node indices: a sequence of ints, or an integer tensor."""
    if (type(path) is list or type(path) is tuple) and all(type(n) is int for n in path):
        return tuple(path)  # plain ints (not bools): operator.index would give each back as it is
    try:
        if isinstance(path, torch.Tensor):
            if path.is_floating_point():
                raise TypeError
            return tuple(path.reshape(-1).tolist())
        return tuple(operator.index(n) for n in path)
    except (TypeError, ValueError, RuntimeError):
        _fail(name, f"a path that is not a sequence of node indices: {path!r:.80}", "path_not_in_tree")
    raise AssertionError  # _fail raised


# -- specd's own tree rule -----------------------------------------------------------------------
class _GivenTests(RejectionSampler):
    """RejectionSampler whose acceptance tests are given (``passed`` bool[B, N]) and whose tested rows
    were computed already (they read no uniform): ``decide`` on every outcome of one round at once."""

    def __init__(self, passed: torch.Tensor, tested: Tested):
        self.passed, self.tested = passed, tested

    def tested_rows(self, rows: Rows) -> Tested:
        return self.tested

    def acceptance_tests(self, p_draft, q_draft, accept_u, valid):
        return self.passed & valid


def node_rows(rounds: Sequence[tuple[DraftTree, torch.Tensor, torch.Tensor | None]], copies: Sequence[int]) -> Rows:
    """The Rows of a batch of rounds (one vocabulary), round i's tree as ``copies[i]`` requests in
    turn: p as given, each node's q row its law under ``tree.drawn`` (sampled: the parent's q without
    the earlier siblings, renormalized; iid: the parent's q; rank: the point mass on the node's
    token), a round's copies sharing its q rows."""
    vocab = rounds[0][1].shape[-1]
    k_max = max(len(tree) for tree, _, _ in rounds)
    source: list[int] = []  # each law's row of the rounds' q rows, stacked
    removed: tuple[list[int], list[int]] = ([], [])  # (law, token): an earlier sibling's, removed
    renormalized: list[int] = []
    q_index, starts = [], [0]
    for tree, _, q in rounds:
        starts.append(starts[-1] + len(tree) + 1)
        if tree.drawn == "rank":
            q_index.append([-1] * k_max)
            continue
        if q is None:
            raise UsageError(f"children drawn {tree.drawn} need the draft's rows")
        first = len(source)
        for node, parent in enumerate(tree.parents):
            source.append(starts[-2] + parent + 1)
            if tree.drawn == "sampled":
                renormalized.append(first + node)
                for sibling in tree.children[parent][: tree.ranks[node]]:
                    removed[0].append(first + node)
                    removed[1].append(tree.tokens[sibling])
        q_index.append(list(range(first, first + len(tree))) + [-1] * (k_max - len(tree)))
    if source:
        none = torch.zeros(0, vocab, dtype=torch.float64)  # a lookup's round has no q: rows it never reads
        q_rows = torch.cat([q if q is not None else none.new_zeros(len(t) + 1, vocab) for t, _, q in rounds])
        laws = q_rows.to(torch.float64)[source]
        laws[removed] = 0.0
        laws[renormalized] = laws[renormalized] / laws[renormalized].sum(dim=-1, keepdim=True)
    else:
        laws = torch.zeros(0, vocab, dtype=torch.float64)
    each = [i for i, c in enumerate(copies) for _ in range(c)]  # each request's round
    trees = [rounds[i][0] for i in each]
    k_lens = [len(tree) for tree in trees]
    return Rows(
        torch.cat([rounds[i][1] for i in each]),
        torch.tensor(list(accumulate((k + 1 for k in k_lens), initial=0))[:-1], dtype=torch.int64),
        laws,
        torch.tensor([q_index[i] for i in each], dtype=torch.int64).reshape(len(each), k_max),
        torch.tensor([list(t.tokens) + [-1] * (k_max - len(t)) for t in trees], dtype=torch.int64).reshape(
            len(each), k_max
        ),
        torch.tensor(k_lens, dtype=torch.int64),
        vocab,
        None,
        tuple(k_lens),
        TreeBatch.of(trees, k_max, "cpu"),
    )


@dataclass(frozen=True)
class _Outcomes:
    """specd's rule on one round, every outcome decided: each node's test ratio p'(d) / q'(d) (exact),
    and for each last accepted node (ROOT: none) the accepted path and the terminal law."""

    tree: DraftTree
    ratios: tuple[Fraction, ...]
    decided: dict[int, tuple[tuple[int, ...], torch.Tensor]]


def _outcomes(rounds: list[tuple[DraftTree, torch.Tensor, torch.Tensor | None]]) -> list[_Outcomes]:
    """``RejectionSampler.decide`` on every outcome of many rounds (one vocabulary) in one call: the
    rule's walk accepts a path (its tests passed, every sibling tried before it refused), so a round's
    outcomes are one per node that can end it and one for none; the batch holds one request per
    outcome, its tests given, and each round's tested rows, computed once, shared by its requests."""
    leaves = [[ROOT, *range(len(tree))] for tree, _, _ in rounds]
    one = node_rows(rounds, [1] * len(rounds))
    tested = RejectionSampler().tested_rows(one)
    counts = torch.tensor([len(each) for each in leaves])
    rows = node_rows(rounds, counts.tolist())
    later = None if tested.later_index is None else tested.later_index.repeat_interleave(counts, dim=0)
    shared = Tested(tested.p_draft.repeat_interleave(counts, dim=0), tested.later, later)
    # request b ends at leaf: every node on its path passed, every other refused
    ends = [(tree, leaf) for (tree, _, _), each in zip(rounds, leaves) for leaf in each]
    on_path = [(b, n) for b, (tree, leaf) in enumerate(ends) for n in tree.path(leaf)]
    passed = torch.zeros(rows.draft.shape, dtype=torch.bool)
    if on_path:
        passed[tuple(torch.tensor(on_path).T)] = True
    decision = _GivenTests(passed, shared).decide(rows, torch.zeros(rows.draft.shape, dtype=torch.float64))
    assert decision.leaf is not None and decision.leaf.tolist() == [leaf for _, leaf in ends]
    p_draft, q_draft = tested.p_draft.tolist(), one.q_draft(tested.p_draft.dtype).tolist()
    terminal = decision.terminal_rows
    out, b = [], 0
    for (tree, _, _), each, p_d, q_d in zip(rounds, leaves, p_draft, q_draft):
        ratios = tuple(Fraction(a) / Fraction(c) for a, c in zip(p_d[: len(tree)], q_d[: len(tree)]))
        out.append(_Outcomes(tree, ratios, {leaf: (tree.path(leaf), terminal[b + j]) for j, leaf in enumerate(each)}))
        b += len(each)
    return out


_ROUNDS: dict = {}  # rounds' outcomes, by their inputs (the oracle runs one round several times)
KEPT = 64  # rounds decided one at a time kept in _ROUNDS
BATCH_FLOATS = 1 << 21  # the most target rows x V of one batch ``SpecdTreeRule.ahead`` decides


def _round_key(tokens, parents, drawn: str, p: torch.Tensor, q: torch.Tensor | None) -> tuple:
    return (tuple(tokens), tuple(parents), drawn, p.numpy().tobytes(), None if q is None else q.numpy().tobytes())


def specd_tree_sampler(tokens, parents, depths, p, q, drawn, u):
    """specd's tree rule (RejectionSampler.decide over the tree, as production runs it: tested rows,
    walk, terminal law), each node's acceptance test U_n < p'(d) / q'(d) read from the stream, exactly:
    the walk descends into the first child that passes; ``decide`` ran once per round on every outcome
    the walk can reach (``_outcomes``), or for a batch of rounds at once (``SpecdTreeRule.ahead``)."""
    key = _round_key(tokens.tolist(), parents.tolist(), drawn, p, q)
    found = _ROUNDS.get(key)
    if found is None:
        if len(_ROUNDS) > KEPT:
            _ROUNDS.clear()
        found = _ROUNDS[key] = _outcomes([(DraftTree(key[0], key[1], drawn), p, q)])[0]
    at = ROOT
    while True:
        for child in found.tree.children.get(at, ()):
            if u.node(child) < found.ratios[child]:
                at = child
                break
        else:
            path, law = found.decided[at]
            return path, law.clone()


SPECD_RULE = "specd's tree rule (RejectionSampler.decide over the tree)"


class SpecdTreeRule(TreeSamplerUnderTest):
    """specd's own tree rule under test (``specd_tree_sampler``). Its code is specd's, so the checks run
    it in their own process (specd.oracles.samplers.sandbox), and each batch of rounds they hand over is
    decided before it is run (``ahead``): many rounds to a call of ``decide``, as production decides a
    batch of requests, where one call a round spent most of a check's time."""

    def __init__(self) -> None:
        super().__init__("specd", specd_tree_sampler, SPECD_RULE)

    def ahead(self, rounds: Sequence[TreeRound]) -> None:
        _ROUNDS.clear()
        for batch in _batches(rounds):
            for rnd, found in zip(batch, _outcomes([(r.tree, r.p, r.q) for r in batch])):
                _ROUNDS[_round_key(rnd.tree.tokens, rnd.tree.parents, rnd.tree.drawn, rnd.p, rnd.q)] = found


def _batches(rounds: Sequence[TreeRound]) -> Iterator[list[TreeRound]]:
    """The rounds by vocabulary, in batches whose requests hold at most BATCH_FLOATS of target rows."""
    by_vocab: dict[int, list[TreeRound]] = {}
    for rnd in rounds:
        by_vocab.setdefault(rnd.p.shape[-1], []).append(rnd)
    for vocab, group in by_vocab.items():
        batch: list[TreeRound] = []
        size = 0
        for rnd in group:
            rows = (len(rnd.tree) + 1) ** 2 * vocab  # its outcomes' requests' target rows
            if batch and size + rows > BATCH_FLOATS:
                yield batch
                batch, size = [], 0
            batch.append(rnd)
            size += rows
        if batch:
            yield batch


# -- loading --------------------------------------------------------------------------------------
def tree_shipped() -> dict[str, tuple[Callable[..., Callable], str, tuple[float, ...]]]:
    """name -> (its builder from parameters, what it is, its default parameters)."""
    return {
        "specd": (lambda: specd_tree_sampler, SPECD_RULE, ()),
        "specinfer": (lambda: pub.specinfer, "SpecInfer's multi-step speculative sampling (Miao et al. 2023)", ()),
        "rrs": (lambda: pub.recursive_rejection, "recursive rejection sampling (Jeon et al. 2024)", ()),
        "sglang": (pub.sglang_target_only, "SGLang tree_speculative_sampling_target_only", (1.0, 1.0)),
        "eagle": (lambda: pub.eagle_posterior, "EAGLE's evaluate_posterior (sampling)", ()),
        "trtllm": (lambda: pub.trtllm_dynamic_tree, "TensorRT-LLM's dynamic-tree rejection (as of PR #15098)", ()),
        "trtllm-12588": (lambda: pub.trtllm_12588, "TensorRT-LLM's dynamic-tree rejection of PR #12588", ()),
        "llamacpp": (lambda: pub.llamacpp_branches, "llama.cpp speculative.cpp's multi-branch verification", ()),
        "medusa-typical": (pub.medusa_typical, "Medusa's typical acceptance", (0.09, 0.3)),
    }


def load_tree_sampler(spec: str) -> TreeSamplerUnderTest:
    """A shipped tree rule by name (``NAME`` or ``NAME@a,b`` for its parameters: sglang@0.5,1 is
    threshold_single 0.5, threshold_acc 1), ``module:attr`` imported or ``path/to/file.py:attr`` loaded
    (its code runs)."""
    if is_file_spec(spec):
        chain = load_sampler(spec)  # loads the file the one way (its checks, its errors)
        return TreeSamplerUnderTest(chain.name, chain.fn, chain.description)
    name, at, args = spec.partition("@")
    shipped = tree_shipped()
    if name in shipped:
        build, description, defaults = shipped[name]
        values = _parameters(spec, args, len(defaults)) if at else defaults
        if values:
            description += " at (" + ", ".join(f"{v:g}" for v in values) + ")"
        if name == "specd":
            return SpecdTreeRule()
        return TreeSamplerUnderTest(spec, build(*values), description)
    if at or ":" not in spec:
        raise UsageError(
            f"--sampler with --tree takes module:attr, path/to/file.py:attr or one of {', '.join(shipped)}; "
            f"got {spec!r}"
        )
    chain = load_sampler(spec)  # imports module:attr the one way (its checks, its errors)
    return TreeSamplerUnderTest(chain.name, chain.fn, chain.description)


def _parameters(spec: str, args: str, count: int) -> tuple[float, ...]:
    try:
        values = tuple(float(a) for a in args.split(","))
    except ValueError:
        values = ()
    if len(values) != count or not all(math.isfinite(v) and v >= 0 for v in values):
        raise UsageError(f"--sampler {spec!r}: takes {count} non-negative number(s) after @, e.g. sglang@0.5,1")
    return values


def as_tree_sampler(obj, name: str | None = None) -> TreeSamplerUnderTest:
    """A function, or a class built here with no arguments, under the tree protocol."""
    name = name or getattr(obj, "__qualname__", None) or type(obj).__name__
    if inspect.isclass(obj):
        with loading(f"building the sampler {name} with no arguments"):
            obj = obj()
    if not callable(obj):
        raise UsageError(f"{name} is not callable; a tree sampler is a function or a class with __call__")
    doc = (inspect.getdoc(obj) or "").strip().splitlines()
    return TreeSamplerUnderTest(name, obj, doc[0] if doc else name)
