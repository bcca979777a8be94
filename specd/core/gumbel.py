"""Drafter-invariant sampling: shared Gumbel noise per output position (the ``invariant`` rule).

Under the ``invariant`` rule the token at output position t of a request is

    x_t = argmax_v ( log p_t(v) + G_t(v) ),

the Gumbel-max of the target's processed row p_t, where the noise G_t(v) is a pure function
of (seed, request id, t, v). Gumbel-max draws exactly from p_t (P(x_t = v) = p_t(v)), and the
noise of one position is independent of every other's, so decoding this way samples the
target's joint exactly. A model draft proposes with the same noise on its own row q_t
(d_t = argmax_v log q_t(v) + G_t(v)); verification accepts d_t iff it equals x_t and at the
first mismatch emits x_t (after K accepted drafts, the bonus x_{t+K}). Every emitted token is
then the target's own Gumbel-max token, so the text is that of target-only decoding with the
same seed, token for token, whatever the draft, K, batch, layout or machine: speculation
changes only the speed. A draft token is accepted with probability at least (1 - TV)/(1 + TV)
(TV: total variation between p_t and q_t), below the ``maximal`` rule's 1 - TV.

The noise comes from a counter-based generator written in integer tensor ops (SplitMix64
over the key, the position and the token id), vectorized over the vocabulary, with the same
bits on every device. The comparison runs in float64.
"""

from __future__ import annotations

import functools
import hashlib

import numpy as np
import torch

from specd.core.probability import argmax_ids
from specd.core.transfer import to_device

_MASK = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15
_MIX1 = 0xBF58476D1CE4E5B9
_MIX2 = 0x94D049BB133111EB


def _signed(x: int) -> int:
    """A 64-bit pattern as the int64 that holds it (torch has no uint64 arithmetic)."""
    x &= _MASK
    return x - (1 << 64) if x >= 1 << 63 else x


def _shift_right(x: torch.Tensor, bits: int) -> torch.Tensor:
    """Logical right shift of int64 bit patterns (torch's >> is arithmetic)."""
    return (x >> bits) & ((1 << (64 - bits)) - 1)


def splitmix64(x: torch.Tensor) -> torch.Tensor:
    """SplitMix64's finalizer on int64[...] bit patterns (wrapping multiplication) -> int64[...]."""
    return splitmix64_(x.clone())


def splitmix64_(x: torch.Tensor) -> torch.Tensor:
    """``splitmix64`` in place (x int64[...], overwritten and returned): one temporary per step
    instead of a new tensor per operation, which at a vocabulary's size is most of the cost."""
    x.add_(_signed(_GOLDEN))
    x.bitwise_xor_(_shift_right(x, 30)).mul_(_signed(_MIX1))
    x.bitwise_xor_(_shift_right(x, 27)).mul_(_signed(_MIX2))
    return x.bitwise_xor_(_shift_right(x, 31))


@functools.lru_cache(maxsize=1 << 14)  # read once per request and row of every round
def request_key(seed: int, request_id: str) -> int:
    """The noise key of one request: 64 bits of blake2b over (seed, request id), as an int64."""
    digest = hashlib.blake2b(f"{seed}\x1f{request_id}\x1finvariant".encode(), digest_size=8).digest()
    return _signed(int.from_bytes(digest, "little"))


def uniforms_at(key: int | torch.Tensor, positions: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """U_t(v) in (0, 1), elementwise: key int64 (or int64[...] like positions), positions and tokens
    int64[...] of one shape -> float64[...]. The one home of the noise's formula: 53 bits of
    SplitMix64(SplitMix64(key ^ SplitMix64(t)) ^ SplitMix64(v)), offset by half a step so that
    neither 0 nor 1 occurs (log(-log U) is finite)."""
    return unit(splitmix64_(position_bits(key, positions) ^ splitmix64(tokens.to(torch.int64))))


def position_bits(key: int | torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """The formula's per-position half, SplitMix64(key ^ SplitMix64(t)): int64[...] like positions."""
    return splitmix64_(splitmix64(positions.to(torch.int64)) ^ key)


def position_bits_of(keys: list[int], positions: list[int]) -> list[int]:
    """``position_bits`` for a round's few rows, in Python integers (the same bits, as int64): a
    race then sends one small tensor to the device instead of some thirty tensor operations."""
    return [_signed(_splitmix64_int(_splitmix64_int(t) ^ (key & _MASK))) for key, t in zip(keys, positions)]


def _splitmix64_int(x: int) -> int:
    """SplitMix64's finalizer on an unsigned 64-bit integer (``splitmix64_`` on one value)."""
    x = (x + _GOLDEN) & _MASK
    x = ((x ^ (x >> 30)) * _MIX1) & _MASK
    x = ((x ^ (x >> 27)) * _MIX2) & _MASK
    return x ^ (x >> 31)


def unit(bits: torch.Tensor) -> torch.Tensor:
    """The top 53 bits of int64[...] as a float64 in (0, 1), offset by half a step."""
    return (_shift_right(bits, 11).to(torch.float64) + 0.5) * 2.0**-53


@functools.lru_cache(maxsize=4)
def token_bits(vocab: int, device: torch.device) -> torch.Tensor:
    """SplitMix64(v) for every token id, int64[V]: the formula's per-token half, the same for every
    row and position, so it is computed once per vocabulary and device."""
    return splitmix64_(torch.arange(vocab, dtype=torch.int64, device=device))


def uniforms(key: int | torch.Tensor, positions: torch.Tensor, vocab: int) -> torch.Tensor:
    """U_t(v) for each position and every token: key int64 (or one per position, int64[R]),
    positions int64[R] -> float64[R, V]."""
    row = position_bits(key, positions).unsqueeze(-1)
    return unit(splitmix64_(row ^ token_bits(vocab, positions.device).unsqueeze(0)))


def gumbel(key: int | torch.Tensor, positions: torch.Tensor, vocab: int) -> torch.Tensor:
    """G_t(v) = -log(-log U_t(v)), standard Gumbel noise: -> float64[R, V]."""
    return -torch.log(-torch.log(uniforms(key, positions, vocab)))


def race(rows: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
    """The Gumbel-max token of each row: rows float[R, V] (probabilities, need not be normalized),
    noise float64[R, V] -> int64[R]. A token of zero mass never wins."""
    rows64 = rows.to(torch.float64)
    scores = torch.where(rows64 > 0, rows64.log(), torch.full_like(rows64, float("-inf"))) + noise.to(rows64.device)
    return scores.argmax(dim=-1)


RACE_CHUNK = 1 << 21  # entries raced at once: the temporaries stay a few MB, reused, never fresh memory


def race_tokens(rows: torch.Tensor, keys: list[int], positions: list[int]) -> torch.Tensor:
    """The Gumbel-max token of each row under its own request's noise at its own output position:
    rows float[R, V], keys and positions of length R -> int64[R].

    Noise is drawn only where a row has mass (a token of zero mass never wins, and each draw is a
    function of its token id alone), so on a CPU, with top-k or top-p, a row costs its support, not
    V. Full rows (and every row on a GPU, where counting the support would read from the device) are
    raced whole a few at a time (``RACE_CHUNK`` entries), each row's half of the formula computed once."""
    device = rows.device
    n, vocab = rows.shape
    per_row = to_device(position_bits_of(keys, positions), torch.int64, device)
    per_token = token_bits(vocab, device)
    positive = None  # on a CPU: which entries have mass, counted once and read by either race
    if device.type == "cpu" and rows.dtype in (torch.float32, torch.float64):
        values = rows.detach().numpy()
        positive = values > 0
        if 4 * int(np.count_nonzero(positive)) < positive.size:  # mostly empty rows: index their support alone
            return _race_support(values, np.flatnonzero(positive), per_row, per_token)
    won = torch.empty(n, dtype=torch.int64, device=device)
    step = max(1, RACE_CHUNK // max(vocab, 1))
    for start in range(0, n, step):
        chunk = rows[start : start + step].to(torch.float64, copy=True)  # raced in place
        mass = chunk > 0 if positive is None else torch.from_numpy(positive[start : start + step])
        u = unit(splitmix64_(per_row[start : start + step].unsqueeze(1) ^ per_token.unsqueeze(0)))
        scores = chunk.log_().sub_(u.log_().neg_().log_()).masked_fill_(~mass, float("-inf"))
        won[start : start + step] = argmax_ids(scores)
    return won


def _race_support(rows, support, per_row: torch.Tensor, per_token: torch.Tensor) -> torch.Tensor:
    """``race_tokens`` on CPU rows (numpy float[R, V]) over their ``support`` alone (the flat indices
    of their entries of mass, ascending: numpy int64): each row's
    winner is the first best score among its tokens of mass, in token order (the full race's
    argmax, the lowest id on a tie); a row without mass gets 0, as a row of -inf scores does. The
    noise's integer half runs in numpy (the same bits as ``splitmix64_`` and ``unit``: wrapping
    uint64 arithmetic, exact conversions), a few array operations where torch's would be some twenty
    small ones, each slow right after a model call; the logarithms stay torch's."""
    n = rows.shape[0]
    row, token = np.divmod(support, rows.shape[1])
    bits = per_row.numpy().view(np.uint64)[row] ^ per_token.numpy().view(np.uint64)[token]
    u = torch.from_numpy(_unit_np(_splitmix64_np(bits)))
    p = torch.from_numpy(rows[row, token].astype(np.float64))
    scores = p.log_().sub_(u.log_().neg_().log_()).numpy()
    ends = np.cumsum(np.bincount(row, minlength=n))
    won = np.zeros(n, dtype=np.int64)
    start = 0
    for r, end in enumerate(ends.tolist()):
        if end > start:
            won[r] = token[start + int(scores[start:end].argmax())]
        start = end
    return torch.from_numpy(won)


def _splitmix64_np(x: np.ndarray) -> np.ndarray:
    """``splitmix64_`` on uint64[...] in place (numpy's uint64 arithmetic wraps, as the formula's does)."""
    x += np.uint64(_GOLDEN)
    x ^= x >> np.uint64(30)
    x *= np.uint64(_MIX1)
    x ^= x >> np.uint64(27)
    x *= np.uint64(_MIX2)
    x ^= x >> np.uint64(31)
    return x


def _unit_np(bits: np.ndarray) -> np.ndarray:
    """``unit`` on uint64[...]: the top 53 bits as a float64 in (0, 1), offset by half a step."""
    return ((bits >> np.uint64(11)).astype(np.float64) + 0.5) * 2.0**-53


class SharedNoise:
    """The invariant rule's draft noise: a model draft proposes the Gumbel-max of its row under the
    request's noise at each drafted position, instead of reading proposal uniforms. Keys and
    positions come from the sampler (its extension points ``draft_noise_key`` and ``noise_position``)."""

    def __init__(self, sampler):
        self.sampler = sampler

    def race(self, states, offset, q_rows: torch.Tensor) -> torch.Tensor:
        """The drafts at ``offset`` (0: the round's first position; an int, or one per state) for
        ``states``: q_rows float[N, V] -> int64[N]."""
        offsets = [offset] * len(states) if isinstance(offset, int) else list(offset)
        keys = [self.sampler.draft_noise_key(s) for s in states]
        positions = [self.sampler.noise_position(s, o) for s, o in zip(states, offsets)]
        return race_tokens(q_rows, keys, positions)

    def race_top(self, states, offsets, q_rows: torch.Tensor, m: int) -> torch.Tensor:
        """The m tokens of highest score log q + G at each row's position, best first: the Gumbel-top-m,
        a sample of m distinct tokens without replacement from q (its first is ``race``'s) -> int64[N, m]
        (-1 past a row's tokens of mass)."""
        keys = [self.sampler.draft_noise_key(s) for s in states]
        positions = [self.sampler.noise_position(s, o) for s, o in zip(states, offsets)]
        noise = uniforms(
            torch.tensor(keys, dtype=torch.int64), torch.tensor(positions, dtype=torch.int64), q_rows.shape[1]
        )
        rows64 = q_rows.to(torch.float64)
        scores = torch.where(rows64 > 0, rows64.log(), float("-inf")) - noise.to(rows64.device).log().neg().log()
        top = scores.topk(min(m, scores.shape[1]), dim=-1)
        return torch.where(top.values > float("-inf"), top.indices, -1)
