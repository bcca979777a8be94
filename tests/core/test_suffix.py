"""The suffix source: its automaton finds the longest earlier match of the output's suffix, proposes
the continuation seen most often there, and grows in amortized constant work per token."""

import random
from types import SimpleNamespace

import torch

from specd.core.engine import SpeculativeEngine
from specd.core.proposer import DraftContext, NgramProposer
from specd.core.state import Request
from specd.core.suffix import SuffixCache, SuffixIndex, SuffixProposer
from tests.helpers import table_engine


def longest_earlier_suffix(seq: list[int]) -> int:
    """Brute force: the longest suffix of seq that also ends at an earlier position."""
    n = len(seq)
    for length in range(n - 1, 0, -1):
        tail = seq[n - length :]
        if any(seq[e - length + 1 : e + 1] == tail for e in range(length - 1, n - 1)):
            return length
    return 0


def test_the_match_is_the_longest_earlier_suffix_and_the_proposal_follows_an_earlier_occurrence():
    rng = random.Random(3)
    for _ in range(40):
        seq = [rng.randrange(3) for _ in range(rng.randrange(1, 60))]
        index = SuffixIndex()
        for i, token in enumerate(seq):
            index.extend(token)
            so_far = seq[: i + 1]
            proposal, length = index.lookup(4)
            assert length == longest_earlier_suffix(so_far)
            if length:
                tail = so_far[len(so_far) - length :]
                ends = [e for e in range(length - 1, len(so_far) - 1) if so_far[e - length + 1 : e + 1] == tail]
                assert any(tuple(so_far[e + 1 : e + 1 + len(proposal)]) == proposal for e in ends)
            else:
                assert proposal == ()
        assert len(index.length) <= 2 * max(len(seq), 1)  # a suffix automaton: at most 2n states


def test_the_continuation_seen_most_often_wins_and_ties_go_to_the_most_recent():
    index = SuffixIndex()
    for token in [9, 1, 2, 7, 9, 1, 2, 7, 9, 1, 2, 8, 9, 1, 2]:  # after "9 1 2": 7, 7, then 8 (the latest)
        index.extend(token)
    assert index.lookup(2) == ((7, 9), 3)  # the longest earlier match "9 1 2", its most frequent follower
    tie = SuffixIndex()
    for token in [5, 3, 6, 5, 3, 8, 5, 3]:  # "5 3" counted once it had an earlier match: then 8 followed it
        tie.extend(token)
    assert tie.lookup(1)[0] == (8,)


def test_the_index_grows_with_the_published_output_only_and_never_rescans():
    cache = SuffixCache()
    cache.open(0)
    output = (4, 5, 6, 4, 5)
    index = cache.follow(0, output)
    states = len(index.length)
    assert cache.follow(0, output) is index and len(index.length) == states  # nothing new: no work
    cache.follow(0, output + (6,))
    assert index.tokens == [4, 5, 6, 4, 5, 6]


def test_the_suffix_source_proposes_point_masses_and_is_exact_for_greedy():
    proposer = SuffixProposer(4)
    cache = proposer.new_cache()
    cache.open(0)

    class State:
        slot, output = 0, (1, 2, 3, 1, 2)

    proposal = proposer.propose([State()], [3], cache, DraftContext(None, "max_shift", torch.float64))
    assert proposal.drafts == ((3, 1, 2),) and proposal.q_index == ((-1, -1, -1),)  # point masses: ids, no rows
    assert proposal.q.shape == (0, 4)
    assert all(torch.equal(proposal.q_row(0, i), torch.eye(4, dtype=torch.float64)[t]) for i, t in enumerate((3, 1, 2)))
    engine = table_engine(vocab=4, target_temperature=0)
    base = table_engine(vocab=4, target_temperature=0, k=0)
    from specd.core.engine import SpeculativeEngine
    from specd.core.state import Request

    requests = [Request("a", (1, 2, 3, 1, 2), 10), Request("b", (0, 0, 1), 8)]
    spec = SpeculativeEngine(engine.target, SuffixProposer(4), engine.target_policy, engine.config)
    assert spec.run(requests).new_tokens() == base.run(requests).new_tokens()


def test_each_lookup_reports_the_length_of_the_match_its_proposal_continues():
    rng = random.Random(5)
    suffix, ngram = SuffixProposer(4), NgramProposer(3, 4)
    for _ in range(30):
        output = tuple(rng.randrange(3) for _ in range(rng.randrange(2, 40)))
        state = SimpleNamespace(slot=0, output=output)  # what a lookup reads of a request
        cache = SuffixCache()
        cache.open(0)
        length = suffix.match_length(state, cache)
        assert length == longest_earlier_suffix(list(output))
        assert suffix.available(state, cache) == (length > 0)
        found, size = ngram.find(output, 4)
        assert ngram.match_length(state, None) == size <= 3 and (size > 0) == bool(found)
        if found:  # the tail of that length occurred earlier, followed by the proposal
            assert any(
                output[s : s + size] == output[-size:] and output[s + size : s + size + len(found)] == found
                for s in range(len(output) - size)
            )


def test_suffix_run_also_matches_the_texts_of_requests_already_finished():
    cache = SuffixCache(run=True)
    cache.open(0)
    cache.follow(0, (7, 1, 2, 3, 4, 5, 6))
    cache.close(0)  # finished: its text joins the run's
    cache.open(1)
    assert cache.lookup(1, (9, 2, 3), 3) == ((4, 5, 6), 2)  # a match in the finished text
    assert cache.lookup(1, (9, 2, 3, 4), 5) == ((5, 6), 3)  # never past that text's end
    assert cache.lookup(1, (2, 3, 8, 2, 3), 2) == ((8, 2), 2)  # a tie: the request's own match
    assert cache.lookup(1, (2, 3, 8, 2, 3, 4), 2) == ((5, 6), 3)  # a longer one in the finished text
    own = SuffixCache()
    own.open(1)
    assert own.lookup(1, (9, 2, 3), 3) == ((), 0)  # plain suffix: nothing of other requests


def test_suffix_run_walks_each_request_forward_and_again_when_a_text_joins():
    rng = random.Random(9)
    texts = [tuple(rng.randrange(4) for _ in range(30)) for _ in range(3)]
    cache = SuffixCache(run=True)
    for slot, text in enumerate(texts):
        cache.open(slot)
        cache.follow(slot, text)
    cache.close(0)
    cache.close(1)
    probe = texts[2]
    for n in range(1, len(probe) + 1):
        _, length = cache.run.match(2, probe[:n])  # forward, one token a call
        brute = max(
            (
                m
                for m in range(1, n + 1)
                for t in texts[:2]
                if any(t[s : s + m] == probe[n - m : n] for s in range(31 - m))
            ),
            default=0,
        )
        assert length == brute
    cache.open(3)
    cache.close(3)  # an empty text adds nothing
    assert cache.run.texts == 2


def test_a_request_drafts_from_a_finished_requests_text_under_suffix_run():
    base = table_engine(vocab=16, target_temperature=0, k=4)
    same = [Request("a", (3, 1, 4, 1, 5), 20), Request("b", (3, 1, 4, 1, 5), 20)]  # b decodes after a

    def run(proposer):
        engine = SpeculativeEngine(base.target, proposer, base.target_policy, base.config)
        return engine.run(same, batch_size=1)

    plain, shared = run(SuffixProposer(16)), run(SuffixProposer(16, run=True))
    assert shared.new_tokens() == plain.new_tokens()  # greedy: the draft never changes the text
    b_plain, b_shared = (r.states[1].history for r in (plain, shared))
    assert b_shared.accepted_tokens == b_shared.draft_tokens == 16  # a's text, copied: 4 rounds of 4 + 1
    assert b_shared.k_schedule == (4, 4, 4, 4) and b_plain.accepted_tokens < 16
