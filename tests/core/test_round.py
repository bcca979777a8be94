"""The round: launched (propose -> verify -> decide, nothing read) and settled (one read, commit) in
one module, the only place the rule's decision is taken."""

import ast
import inspect
from functools import cache
from pathlib import Path

import specd
from specd.core.round import decode, launch, settle, speculative_round, taken_again
from specd.core.rules.greedy import GreedyRule
from specd.core.rules.invariant import InvariantRule
from specd.core.rules.maximal import MaximalRule
from specd.core.state import Request
from tests.helpers import table_engine

PACKAGE = Path(specd.__file__).parent
SAMPLER_DECISIONS = {"decide", "decide_greedy", "decide_invariant", "decide_block", "sample_terminal"}
RULE_FILES = {"core/rules/greedy.py", "core/rules/maximal.py", "core/rules/invariant.py", "core/rules/block.py"}


@cache
def method_calls() -> tuple[tuple[str, str, str], ...]:
    """(module path, enclosing function, method name) of every method call in the package, read once."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text())
        for func in ast.walk(tree):
            if not isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(func):
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                    found.append((str(path.relative_to(PACKAGE)), func.name, node.func.attr))
    return tuple(found)


def calls_of(names: set[str]) -> list[tuple[str, str]]:
    """(module path, enclosing function) of every call of a method named in ``names`` in the package."""
    return sorted({(path, func) for path, func, method in method_calls() if method in names})


# Besides the rules, the oracle's adapter puts a RejectionSampler under the protocol every sampler
# is checked through (verify-oracle --sampler, dtype edges); it decides nothing for a run.
# A lab variant that reads the rows at the wrong temperature wraps the rule's own decision.
ORACLE_ADAPTER = [
    ("oracles/samplers/protocol.py", "rule_sampler"),
    ("oracles/samplers/protocol.py", "sampler"),
    ("oracles/lab/shipped.py", "decide"),
    ("oracles/samplers/tree_protocol.py", "specd_tree_sampler"),
]


def test_the_round_decides_once_through_its_rule_and_only_rules_call_the_math():
    callers = calls_of(SAMPLER_DECISIONS)
    assert {path for path, _ in callers} - {path for path, _ in ORACLE_ADAPTER} == RULE_FILES | {"core/round.py"}
    round_calls = [c for c in callers if c[0] == "core/round.py"]
    assert round_calls == [("core/round.py", "launch"), ("core/round.py", "taken_again")]
    assert "eng.rule.decide(" in inspect.getsource(launch)
    rule_math = [c for c in callers if c[0] in RULE_FILES]
    assert rule_math and all(name == "decide" for _, name in rule_math)


def test_the_round_has_no_branch_on_the_rule():
    for part in (speculative_round, launch, settle, taken_again):
        source = inspect.getsource(part)
        for word in ("greedy", "invariant", "maximal", "block", "race"):
            assert word not in source, (part.__name__, word)


def test_the_scan_sees_calls_where_they_are():
    """Guard against a vacuous scan: the rule's own internal calls are found where they are."""
    assert ("core/sampler.py", "walk_tree") in calls_of({"count_accepted"})


# Every write a round makes to the authoritative state, and where it may happen: the publication
# and the caches following it only in the round; the session's own transitions (prefill, a request
# ended between rounds, a failed round rolled back) in the session.
ROUND_WRITES = {
    "publish": [("core/round.py", "settle"), ("core/transaction.py", "publish")],
    "settle": [
        ("core/round.py", "settle"),
        ("core/session.py", "abort"),
        ("core/session.py", "discard_temporary"),
        ("core/sources.py", "settle"),
    ],
    "retire": [("core/round.py", "settle"), ("core/session.py", "_prefill"), ("core/session.py", "finish")],
    "replace_unpublished": [
        ("core/round.py", "materialize_frontiers"),
        ("core/session.py", "_prefill"),
        ("core/session.py", "finish"),
    ],
    "staged": [("core/round.py", "stage")],
    "finish": [("core/round.py", "decode_events")],
}


def test_a_rounds_writes_happen_in_the_round_module_only():
    for method, where in ROUND_WRITES.items():
        assert calls_of({method}) == sorted(where), method


def test_the_round_reads_top_to_bottom_in_two_short_functions():
    """propose -> verify -> decide in ``launch``, then ``settle``'s commit, one after the other in the module."""
    source = inspect.getsource(launch) + inspect.getsource(settle)
    steps = [source.index(f"# {n}. {name}") for n, name in enumerate(("propose", "verify", "decide", "commit"), 1)]
    assert steps == sorted(steps)
    module = inspect.getsource(inspect.getmodule(launch))
    assert module.index("def launch(") < module.index("def settle(")


def test_every_decision_goes_through_the_runs_rule(monkeypatch):
    """Spy on the rule classes: a greedy, a sampled and an invariant run each decide through their
    rule, once per round."""
    seen = []
    for cls in (GreedyRule, MaximalRule, InvariantRule):

        def spy(self, *args, _original=cls.decide, **kw):
            seen.append(self.name)
            return _original(self, *args, **kw)

        monkeypatch.setattr(cls, "decide", spy)
    for temperature, rule, expected in (
        (0.0, "maximal", "greedy"),
        (1.0, "maximal", "maximal"),
        (1.0, "invariant", "invariant"),
    ):
        seen.clear()
        session = table_engine(target_temperature=temperature, rule=rule).start([Request("a", (0, 1), 6, seed=1)])
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
