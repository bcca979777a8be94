"""benchmarks/suffix_branches.py's replay (issue 36: would a tree of suffix continuations pay?):
one branch replays what ``--draft suffix`` proposes, the other continuations are the match's,
and a tree never takes more rounds than one branch."""

import pytest

from tests.helpers import benchmark


@pytest.fixture(scope="module")
def branches():
    return benchmark("suffix_branches")


def test_other_continuations_are_the_matchs_with_another_first_token(branches):
    #         0  1  2  3  4  5  6  7  8  9
    tokens = [5, 1, 2, 5, 3, 4, 5, 1, 9, 5]  # "5" was followed by 1, 3 and 1
    assert branches.alternatives(tokens, 1, first=1, k=2) == [(3, 4)]
    assert branches.alternatives(tokens, 1, first=7, k=2) == [(3, 4), (1, 9)]  # one per token, the latest
    assert branches.alternatives(tokens, 2, first=1, k=3) == []  # "9 5" never occurred before


def test_one_branch_replays_the_suffix_proposers_rounds(branches):
    prompt = [1, 2, 3, 4, 1, 2, 3, 4]
    text = [1, 2, 3, 4, 1, 2, 7, 7]
    # round 1: draft 1 2 3 (K = 3), all kept, bonus 4; round 2: 1 2 3 against 1 2 7: 2 kept, correction 7;
    # round 3: the lookup after "7" (never seen before it): no match, one plain step
    rounds, rows = branches.replay(prompt, text, 3, width=1)
    assert (rounds, rows) == (3, [4, 4, 1])


def test_a_tree_keeps_the_branch_the_target_takes_and_never_takes_more_rounds(branches):
    prompt = [8, 3, 4, 8, 1, 2, 8]  # after 8: 3 4, then (the lookup's choice, the latest) 1 2
    text = [3, 4, 0]
    # one branch: 1 2 fails at once (correction 3), then "8 3" drafts 4 8: 4 kept, correction 0
    assert branches.replay(prompt, text, 2, width=1) == (2, [3, 3])
    # the tree verifies 1 2 and 3 4 in one call: 3 4 kept, bonus 0
    assert branches.replay(prompt, text, 2, width=2) == (1, [5])
    for k in (1, 2, 4):
        for width in (2, 0):
            for other in (text, [1, 2, 0], [9, 9, 9]):
                assert branches.replay(prompt, other, k, width)[0] <= branches.replay(prompt, other, k, 1)[0]
