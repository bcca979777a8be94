"""Every typed error the library raises, in one place.

Each derives from SpecdError and carries the process exit code the CLI maps it
to (1: a run or check failed; 2: bad input the user can fix) and a stable
``code`` naming the failure. The CLI prints ``str(error)`` as one line; nothing
here prints.
"""

from __future__ import annotations


class SpecdError(Exception):
    """Base class: a failure with a one-line message and an exit code."""

    exit_code = 1
    code = "specd_error"


class UsageError(SpecdError):
    """Bad input that the user typed (options, sizes, file formats)."""

    exit_code = 2
    code = "usage"


# -- the speculative contract, broken at run time (a bug, or a broken component) -----
class ContractViolation(SpecdError):
    code = "contract_violation"


class ImpossibleProposal(ContractViolation):
    """A proposed token has q(d) = 0: it cannot have been sampled from q."""

    code = "impossible_proposal"


class EmptyDistribution(ContractViolation):
    """A processed row has no mass left (every logit masked)."""

    code = "empty_distribution"


class StaleGeneration(ContractViolation):
    """Publication compare-and-swap failed: the request moved on since the round started."""

    code = "stale_generation"


class TransactionStateError(ContractViolation):
    """A round transaction was driven out of order (e.g. publish before stage)."""

    code = "transaction_state"


class CacheIdentityError(ContractViolation):
    """A cache operation broke token/position identity (duplicate, gap, wrong token)."""

    code = "cache_identity"


class UnsupportedCache(SpecdError):
    """A model whose K/V cache cannot be rolled back row by row (sliding window, bounded layers)."""

    exit_code = 2
    code = "unsupported_cache"


# -- engine configuration ------------------------------------------------------------
class UnknownLayout(UsageError):
    code = "unknown_layout"


class UnknownBackend(UsageError):
    code = "unknown_backend"


# -- models and tokenizers -----------------------------------------------------------
class ModelLoadError(SpecdError):
    exit_code = 2
    code = "model_load"


class OutOfMemory(SpecdError):
    code = "out_of_memory"


class EmbeddedModelMissing(SpecdError):
    exit_code = 2
    code = "embedded_model_missing"


class TokenizerMismatch(UsageError):
    """Target and draft name different events with the same id: p(d)/q(d) would be meaningless."""

    code = "tokenizer_mismatch"


# -- files ----------------------------------------------------------------------------
class BadTrace(UsageError):
    code = "bad_trace"


# -- the speedup ledger's fixtures -------------------------------------------------------
class InvalidFixture(UsageError):
    code = "invalid_fixture"


class AlphaOutOfRange(InvalidFixture):
    code = "alpha_out_of_range"


class NotReachConditioned(InvalidFixture):
    code = "not_reach_conditioned"


class OmitsTerminalToken(InvalidFixture):
    code = "omits_terminal_token"


class InvalidCost(InvalidFixture):
    code = "invalid_cost"


class EmptyRange(InvalidFixture):
    code = "empty_range"
