"""The round: one function, the only place the rule's decision is taken."""

import ast
import inspect
from pathlib import Path

import specd
from specd.core.round import decode, speculative_round
from specd.core.sampler import RejectionSampler
from specd.core.state import Request
from tests.helpers import table_engine

PACKAGE = Path(specd.__file__).parent
DECISIONS = {"decide", "decide_greedy", "decide_invariant"}


def calls_of(names: set[str]) -> list[tuple[str, str]]:
    """(module path, enclosing function) of every call of a method named in ``names`` in the package."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text())
        for func in ast.walk(tree):
            if not isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(func):
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in names:
                    found.append((str(path.relative_to(PACKAGE)), func.name))
    return sorted(set(found))


# Besides the round, the oracle's adapter puts a RejectionSampler under the protocol every sampler
# is checked through (verify-oracle --sampler, dtype edges); it decides nothing for a run.
CALLERS = [
    ("core/round.py", "speculative_round"),
    ("oracles/samplers.py", "rule_sampler"),
    ("oracles/samplers.py", "sampler"),
]


def test_the_round_function_is_the_only_caller_of_the_decision():
    assert calls_of(DECISIONS) == sorted(CALLERS)
    assert calls_of({"sample_terminal"}) == sorted(CALLERS)
    production = [c for c in calls_of(DECISIONS | {"sample_terminal"}) if not c[0].startswith("oracles/")]
    assert production == [("core/round.py", "speculative_round")]


def test_the_scan_sees_calls_where_they_are():
    """Guard against a vacuous scan: the rule's own internal calls are found where they are."""
    assert ("core/sampler.py", "decide") in calls_of({"count_accepted"})


# Every write a round makes to the authoritative state, and where it may happen: the publication
# and the caches following it only in the round; the session's own transitions (prefill, a request
# ended between rounds, a failed round rolled back) in the session.
ROUND_WRITES = {
    "publish": [("core/round.py", "speculative_round"), ("core/transaction.py", "publish")],
    "settle": [("core/round.py", "speculative_round"), ("core/session.py", "abort"), ("core/sources.py", "settle")],
    "retire": [("core/round.py", "speculative_round"), ("core/session.py", "_prefill"), ("core/session.py", "finish")],
    "replace_unpublished": [
        ("core/round.py", "materialize_frontiers"),
        ("core/session.py", "_prefill"),
        ("core/session.py", "finish"),
    ],
    "staged": [("core/round.py", "stage")],
    "finish": [("core/round.py", "decode")],
}


def test_a_rounds_writes_happen_in_the_round_module_only():
    for method, where in ROUND_WRITES.items():
        assert calls_of({method}) == sorted(where), method


def test_the_round_reads_top_to_bottom_in_one_short_function():
    source = inspect.getsource(speculative_round)
    steps = [source.index(f"# {n}. {name}") for n, name in enumerate(("propose", "verify", "decide", "commit"), 1)]
    assert steps == sorted(steps)
    assert len(source.splitlines()) <= 80


def test_every_decision_goes_through_the_sampler(monkeypatch):
    """Spy on the sampler class: a greedy and a sampled run both decide there, once per round."""
    seen = []
    for name in DECISIONS:
        original = getattr(RejectionSampler, name)

        def spy(self, *args, _original=original, _name=name, **kw):
            seen.append(_name)
            return _original(self, *args, **kw)

        monkeypatch.setattr(RejectionSampler, name, spy)
    for temperature, expected in ((0.0, "decide_greedy"), (1.0, "decide")):
        seen.clear()
        session = table_engine(target_temperature=temperature).start([Request("a", (0, 1), 6, seed=1)])
        rounds = 0
        while not session.done:
            speculative_round(session)
            rounds += 1
        assert seen == [expected] * rounds


def test_the_loop_is_rounds_until_done():
    """decode (the loop) gives the tokens of calling speculative_round until the session is done,
    with continuous batching and in any batch size."""
    requests = [Request(f"r{i}", (i % 4, 1), 5 + i, seed=i) for i in range(6)]
    session = table_engine().start(requests)
    while not session.done:
        speculative_round(session)
    by_hand = [s.new_tokens for s in session.states()]
    for batch_size in (None, 1, 4):
        engine = table_engine()
        fresh = engine.start()
        fresh.submit(requests)
        assert decode(fresh, batch_size=batch_size).new_tokens() == by_hand
