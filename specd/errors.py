"""Typed errors raised by the library.

Every error a user can provoke from the command line derives from SpecdError and
carries the process exit code the CLI maps it to. The CLI prints ``str(error)``
as one line; nothing here prints.
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


class ContractViolation(SpecdError):
    """The speculative contract was broken at run time (a bug, or a broken component)."""

    code = "contract_violation"


class ImpossibleProposal(ContractViolation):
    """A proposed token has q(d) = 0: it cannot have been sampled from q."""

    code = "impossible_proposal"


class EmptyDistribution(ContractViolation):
    """A processed row has no mass left (every logit masked)."""

    code = "empty_distribution"


class StaleCoordinate(ContractViolation):
    """A proposal or verification was computed at a different round coordinate."""

    code = "stale_coordinate"

    def __init__(self, field: str, what: str, expected: object, actual: object):
        self.field = field
        self.what = what
        super().__init__(
            f"stale {what}: round coordinate field '{field}' differs "
            f"(round has {_short(expected)}, {what} has {_short(actual)})"
        )


class StaleGeneration(ContractViolation):
    """Publication compare-and-swap failed: the request moved on since S_0."""

    code = "stale_generation"


class TransactionStateError(ContractViolation):
    """A round transaction was driven out of order (e.g. publish before stage)."""

    code = "transaction_state"


class CacheIdentityError(ContractViolation):
    """A cache operation broke token/position identity (duplicate, gap, wrong token)."""

    code = "cache_identity"


class UnknownLayout(UsageError):
    code = "unknown_layout"


class UnknownBackend(UsageError):
    code = "unknown_backend"


def _short(value: object, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
