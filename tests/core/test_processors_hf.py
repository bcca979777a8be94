"""The sampling controls against Hugging Face's own processors (and vLLM's definition of the
presence and frequency penalties) on crafted rows: ties, -inf entries, large values."""

import pytest
import torch
from transformers.generation import logits_process as hf

from specd.core.processor_states import History, NewTokens, OutputCounts
from specd.core.processors import (
    BadWords,
    MinNewTokens,
    MinP,
    NoRepeatNGram,
    PresenceFrequencyPenalty,
    SamplingPolicy,
)

INF = float("inf")
ROWS = torch.tensor(
    [
        [2.0, 2.0, 1.0, -INF, 0.5, 0.5, -3.0, 2.0],  # ties at the top, a masked entry
        [1e4, -1e4, 0.0, 1e4 - 1, 3.0, -INF, -INF, 2.5],  # large values
        [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0],  # all equal
    ]
)
SEQUENCES = torch.tensor([[1, 2, 3, 1, 2, 5, 1, 2], [4, 4, 4, 4, 0, 7, 4, 4], [0, 1, 0, 1, 0, 1, 0, 1]])


def same(ours: torch.Tensor, theirs: torch.Tensor) -> None:
    assert torch.equal(torch.isneginf(ours), torch.isneginf(theirs))
    finite = ~torch.isneginf(theirs)
    assert torch.allclose(ours[finite], theirs[finite], rtol=0, atol=1e-6)


@pytest.mark.parametrize("p", [0.05, 0.3, 0.9, 1.0])
def test_min_p_is_hugging_faces(p):
    for rows in (ROWS, ROWS / 0.7):
        same(MinP(p).apply(rows.clone(), ()), hf.MinPLogitsWarper(p)(SEQUENCES, rows.clone()))


@pytest.mark.parametrize("n", [1, 2, 3, 9])
def test_no_repeat_ngram_is_hugging_faces(n):
    proc = NoRepeatNGram(n)
    states = [proc.initial_state(seq.tolist()) for seq in SEQUENCES]
    same(proc.apply(ROWS.clone(), states), hf.NoRepeatNGramLogitsProcessor(n)(SEQUENCES, ROWS.clone()))


@pytest.mark.parametrize("words", [[[3]], [[1, 2]], [[2, 5], [0, 1], [4, 4, 4]], [[7], [0, 7], [6]]])
def test_bad_words_are_hugging_faces(words):
    proc = BadWords(tuple(tuple(w) for w in words))
    states = [proc.initial_state(seq.tolist()) for seq in SEQUENCES]
    theirs = hf.NoBadWordsLogitsProcessor(words, eos_token_id=6)(SEQUENCES, ROWS.clone())
    ours = SamplingPolicy.build(bad_words_ids=words, eos_ids=(6,))  # a bad word that is the EOS is dropped, as there
    proc = next(p for p in ours.processors if isinstance(p, BadWords))
    states = [proc.initial_state(seq.tolist()) for seq in SEQUENCES]
    same(proc.apply(ROWS.clone(), states), theirs)


def test_bad_word_state_follows_the_output():
    proc = BadWords(((1, 2, 3),))
    state = proc.initial_state([9, 9, 1])
    assert isinstance(state, History) and state.tokens == (9, 1)
    state = state.advance(2)
    assert torch.isneginf(proc.apply(torch.zeros(1, 5), [state])[0, 3])
    assert not torch.isneginf(proc.apply(torch.zeros(1, 5), [state.advance(4)])).any()


@pytest.mark.parametrize("made,minimum", [(0, 3), (2, 3), (3, 3), (5, 2)])
def test_min_new_tokens_is_hugging_faces(made, minimum):
    prompt_len = SEQUENCES.shape[1] - made
    theirs = hf.MinNewTokensLengthLogitsProcessor(prompt_len, minimum, [2, 6])(SEQUENCES, ROWS.clone())
    proc = MinNewTokens(minimum, (2, 6))
    state = proc.initial_state(SEQUENCES[0, :prompt_len].tolist())
    for _ in range(made):
        state = state.advance(0)
    assert isinstance(state, NewTokens)
    same(proc.apply(ROWS.clone(), [state] * 3), theirs)


@pytest.mark.parametrize("presence,frequency", [(0.4, 0.25), (-2.0, -1.5), (2.0, -0.5)])
def test_presence_and_frequency_penalties_are_vllms_definition(presence, frequency):
    proc = PresenceFrequencyPenalty(presence, frequency)
    output = [[1, 1, 4], [], [7, 7, 7, 0]]
    states = []
    for out in output:
        state = proc.initial_state([1, 2, 3])  # the prompt is not penalized (vLLM: output tokens only)
        for t in out:
            state = state.advance(t)
        assert isinstance(state, OutputCounts)
        states.append(state)
    expected = ROWS.clone()
    for row, out in enumerate(output):
        counts = torch.bincount(torch.tensor(out, dtype=torch.long), minlength=8).float()
        expected[row] -= frequency * counts + presence * (counts > 0).float()
    same(proc.apply(ROWS.clone(), states), expected)


def test_the_order_of_processors_is_hugging_faces():
    """Repetition penalty, no-repeat n-grams, bad words, min new tokens, then temperature, top-k,
    top-p, min-p: the whole policy against Hugging Face's list in its own order."""
    ours = SamplingPolicy.build(
        temperature=0.7,
        top_k=5,
        top_p=0.9,
        repetition_penalty=1.3,
        no_repeat_ngram_size=2,
        bad_words_ids=[[3], [1, 4]],
        min_new_tokens=4,
        eos_ids=(6,),
        min_p=0.2,
    )
    prompt_len = 6
    theirs = hf.LogitsProcessorList(
        [
            hf.RepetitionPenaltyLogitsProcessor(1.3),
            hf.NoRepeatNGramLogitsProcessor(2),
            hf.NoBadWordsLogitsProcessor([[3], [1, 4]], eos_token_id=6),
            hf.MinNewTokensLengthLogitsProcessor(prompt_len, 4, [6]),
            hf.TemperatureLogitsWarper(0.7),
            hf.TopKLogitsWarper(5),
            hf.TopPLogitsWarper(0.9),
            hf.MinPLogitsWarper(0.2),
        ]
    )(SEQUENCES, ROWS.clone())
    states = []
    for seq in SEQUENCES.tolist():
        state = ours.initial_state(seq[:prompt_len])
        for t in seq[prompt_len:]:
            state = state.advance(t)
        states.append(state)
    same(ours.logits(ROWS.clone(), states), theirs)
