import pytest
import torch

from specd.core.processor_states import RepetitionState
from specd.core.processors import RepetitionPenalty, SamplingPolicy, TopK, TopP
from specd.errors import UsageError


def test_top_k_keeps_exactly_the_k_largest():
    x = torch.tensor([[0.1, 3.0, 2.0, -1.0, 2.5]])
    out = TopK(2).apply(x, ())
    assert torch.isinf(out).tolist() == [[True, False, True, True, False]]


def test_top_p_matches_hugging_face_semantics():
    probs = torch.tensor([[0.5, 0.3, 0.15, 0.05]])
    x = probs.log()
    kept = ~torch.isinf(TopP(0.8).apply(x, ()))
    assert kept.tolist() == [[True, True, False, False]]
    kept = ~torch.isinf(TopP(0.81).apply(x, ()))
    assert kept.tolist() == [[True, True, True, False]]
    kept = ~torch.isinf(TopP(0.01).apply(x, ()))
    assert kept.tolist() == [[True, False, False, False]]  # always keeps the top token


def test_repetition_penalty_divides_positive_and_multiplies_negative():
    x = torch.tensor([[2.0, -2.0, 2.0]])
    out = RepetitionPenalty(2.0).apply(x, [RepetitionState(frozenset({0, 1}))])
    assert out.tolist() == [[1.0, -4.0, 2.0]]


def test_stateful_state_advance_does_not_mutate():
    policy = SamplingPolicy.build(repetition_penalty=1.5)
    s0 = policy.initial_state([1])
    s1 = s0.advance(2)
    assert s0.states[0].seen == frozenset({1})
    assert s1.states[0].seen == frozenset({1, 2})
    assert s0.digest() != s1.digest()


def test_each_row_uses_its_own_state():
    policy = SamplingPolicy.build(repetition_penalty=3.0)
    raw = torch.zeros(2, 3) + torch.tensor([1.0, 1.0, 1.0])
    states = [policy.initial_state([]), policy.initial_state([]).advance(0)]
    probs = policy.probabilities(raw, states, dtype=torch.float64)
    assert torch.allclose(probs[0], torch.full((3,), 1 / 3, dtype=torch.float64))
    assert probs[1, 0] < probs[1, 1]


def test_greedy_is_a_point_mass_on_the_processed_argmax():
    policy = SamplingPolicy.build(temperature=0, logit_bias={2: 10.0})
    probs = policy.probabilities(torch.tensor([[5.0, 1.0, 0.0]]), [policy.initial_state([])])
    assert probs.tolist() == [[0.0, 0.0, 1.0]]


def test_order_is_bias_penalty_temperature_topk_topp():
    policy = SamplingPolicy.build(temperature=0.5, top_k=3, top_p=0.9, logit_bias={0: 1.0}, repetition_penalty=1.2)
    names = [p["name"] for p in policy.describe()["processors"]]
    assert names == ["logit_bias", "repetition_penalty", "temperature", "top_k", "top_p"]


@pytest.mark.parametrize(
    "kwargs",
    [
        {"temperature": -0.1},
        {"temperature": float("nan")},
        {"temperature": float("inf")},
        {"top_p": 0.0},
        {"top_p": 1.5},
        {"top_p": float("nan")},
        {"top_k": -1},
        {"top_k": 2.5},
        {"repetition_penalty": 0.0},
        {"repetition_penalty": float("inf")},
        {"logit_bias": {0: float("nan")}},
        {"logit_bias": {1: float("-inf")}},
    ],
)
def test_bad_policies_are_refused(kwargs):
    with pytest.raises(UsageError):
        SamplingPolicy.build(**kwargs)


def test_top_k_zero_is_no_filter_as_in_hugging_face():
    assert SamplingPolicy.build(temperature=0.7, top_k=0) == SamplingPolicy.build(temperature=0.7)


FULL = dict(
    temperature=0.7,
    top_k=5,
    top_p=0.9,
    logit_bias={1: 0.5},
    repetition_penalty=1.3,
    presence_penalty=0.2,
    frequency_penalty=0.1,
    no_repeat_ngram_size=2,
    bad_words_ids=[[3], [1, 4]],
    min_new_tokens=2,
    eos_ids=[6],
    min_p=0.05,
    real_vocab=11,
)


@pytest.mark.parametrize("kwargs", [{}, {"temperature": 0.7}, FULL, {**FULL, "temperature": 0.0}])
def test_processing_in_a_buffer_equals_processing_a_new_tensor_and_never_writes_raw(kwargs):
    """The processors work in place on a copy of the raw rows: in a caller's buffer (the round's
    scratch) or a new tensor, bit for bit the same rows, and the raw rows stay untouched."""
    policy = SamplingPolicy.build(**kwargs)
    gen = torch.Generator().manual_seed(0)
    raw = torch.randn(4, 12, generator=gen) * 3
    before = raw.clone()
    states = [policy.initial_state([1, 4, 2])]
    for token in (1, 5, 1):
        states.append(states[-1].advance(token))
    fresh = policy.probabilities(raw, states)
    buffer = torch.full_like(raw, float("nan"))
    in_buffer = policy.probabilities(raw, states, out=buffer)
    assert torch.equal(raw, before)
    assert torch.equal(fresh, in_buffer)
    assert torch.equal(policy.logits(raw, states), policy.logits(raw, states, torch.empty_like(raw)))
    if not policy.greedy:
        assert in_buffer.data_ptr() == buffer.data_ptr()  # p was computed in the buffer, not beside it


def test_apply_leaves_its_input_alone_and_apply__changes_it():
    x = torch.tensor([[1.0, 2.0, 3.0]])
    assert torch.equal(TopK(1).apply(x, ()), torch.tensor([[float("-inf"), float("-inf"), 3.0]]))
    assert x.tolist() == [[1.0, 2.0, 3.0]]
    out = TopK(1).apply_(x, ())
    assert out is x and x.tolist() == [[float("-inf"), float("-inf"), 3.0]]
