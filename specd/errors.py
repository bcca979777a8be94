"""Every typed error the library raises, in one place.

Each derives from SpecdError and carries the process exit code the CLI maps it
to (1: a run or check failed; 2: bad input the user can fix) and a stable
``code`` naming the failure. The CLI prints ``str(error)`` as one line; nothing
here prints.
"""

from __future__ import annotations

import re
import reprlib

_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[@-_]")
# Control characters (ESC among them, but not tab and newline) and bidirectional overrides in text
# from files or models would act on the terminal instead of being shown.
_UNPRINTABLE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def printable(text: str, newlines: bool = True) -> str:
    """Text safe to show on a terminal: control characters become visible escapes (\\x1b)."""
    text = _UNPRINTABLE.sub(
        lambda m: f"\\x{ord(m.group()):02x}" if ord(m.group()) < 256 else f"\\u{ord(m.group()):04x}", text
    )
    return text if newlines else text.replace("\n", "\\n")


def one_line(text: str, limit: int = 400) -> str:
    """A message fit for one terminal line: no ANSI codes or control characters, whitespace
    collapsed, and if long, cut at the end of a sentence rather than in the middle of one."""
    text = printable(_ANSI.sub("", text))
    text = " ".join(text.split())
    if len(text) <= limit:
        return text
    cut = max(text.rfind(". ", 0, limit), text.rfind("; ", 0, limit))
    return text[: cut + 1] if cut > limit // 3 else text[: limit - 3].rstrip() + "..."


def shown(value, limit: int = 60) -> str:
    """A value as a message shows it: its repr, abbreviated (a few items of a long list, the ends of
    a long string, and how many there are), so a message never carries a huge value."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 128:
        return f"an integer of about {int(value.bit_length() * 0.30103)} digits"  # repr may refuse to write it
    text = _SHORT.repr(value)
    if len(text) > limit:
        text = text[: limit - 3] + "..."
    if isinstance(value, (str, bytes)) and len(value) > _SHORT.maxstring:
        text += f" ({len(value)} {'characters' if isinstance(value, str) else 'bytes'})"
    elif isinstance(value, (list, tuple, dict, set, frozenset)) and len(value) > _SHORT.maxlist:
        text += f" ({len(value)} items)"
    return text


_SHORT = reprlib.Repr()
_SHORT.maxlist = _SHORT.maxtuple = _SHORT.maxset = _SHORT.maxfrozenset = _SHORT.maxdict = 6
_SHORT.maxstring = _SHORT.maxother = 40
_SHORT.maxlong = 40
MAX_MESSAGE = 2000  # any longer message keeps its start and its end


class SpecdError(Exception):
    """Base class: a failure with a one-line message and an exit code. A message is never huge:
    past MAX_MESSAGE characters its middle is cut."""

    exit_code = 1
    code = "specd_error"

    def __init__(self, message: object = "", *args: object):
        text = str(message)
        if len(text) > MAX_MESSAGE:
            text = text[: MAX_MESSAGE * 2 // 3] + " [...] " + text[-MAX_MESSAGE // 3 :]
        super().__init__(text, *args)


class UsageError(SpecdError):
    """Bad input that the user typed (options, sizes, file formats)."""

    exit_code = 2
    code = "usage"


# -- the speculative contract, broken at run time (a bug, or a broken component) -----
class ContractViolation(SpecdError):
    code = "contract_violation"


class OutputsDiffer(ContractViolation):
    """Greedy target-only and speculative decoding of one target emitted different tokens where the
    target's two best were not within its dtype's rounding of each other (specd.models.run.divergence)."""

    code = "outputs_differ"


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


class GraphsUnavailable(UsageError):
    """--graphs on where a model's steps cannot be captured as CUDA graphs (no CUDA, llama.cpp, a step
    that reads from the device)."""

    code = "graphs_unavailable"


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


class BackendUnavailable(SpecdError):
    """The model backend asked for is not installed here (llama-cpp-python for --backend llama.cpp)."""

    exit_code = 2
    code = "backend_unavailable"


class BackendFailed(SpecdError):
    """A model backend's own call failed at run time (llama.cpp's decode returned an error)."""

    code = "backend_failed"


class CellsExhausted(BackendFailed):
    """A llama.cpp context has no K/V cells left for a call: its cache grows (never shown to a user)."""

    code = "backend_cells"


class TokenizerMismatch(UsageError):
    """Target and draft name different events with the same id: p(d)/q(d) would be meaningless."""

    code = "tokenizer_mismatch"


class RemoteCodeRefused(UsageError):
    """A model folder wants its own Python code run; only --trust-remote-code allows that."""

    code = "remote_code_refused"


class UnsafeWeights(UsageError):
    """Weights stored as a pickle that torch's weights-only loader refuses (it holds code or objects)."""

    code = "unsafe_weights"


# -- samplers under test (verify-oracle --sampler) -------------------------------------------
class SamplerUnavailable(UsageError):
    """A shipped sampler adapter whose library is missing or lacks the function."""

    code = "sampler_unavailable"


class SamplerUnloadable(UsageError):
    """A sampler named module:attr that cannot be loaded: its module raises on import, or its class
    raises when built with no arguments."""

    code = "sampler_unloadable"


class SamplerFailed(SpecdError):
    """A sampler under test raised on an ordinary input, or returned something the protocol does not
    allow. ``finding`` names what it did (``raised``, ``returned_non_finite_rows``, ...), as a
    check's findings do."""

    code = "sampler_failed"

    def __init__(self, message: str, finding: str = "raised"):
        super().__init__(message)
        self.finding = finding


class SamplerAborted(SpecdError):
    """A sampler under test in its own process (specd.oracles.samplers.sandbox) ended that process (exit,
    crash), forked it, or did not answer within its time limit: nothing more can be asked of it.
    Never a refusal (a raised error is one): the check it was in fails, naming ``finding``
    (``exited``, ``crashed``, ``forked``, ``timed_out``, ``broke_the_channel``)."""

    code = "sampler_aborted"

    def __init__(self, message: str, finding: str):
        super().__init__(message)
        self.finding = finding


class UniformAsNumber(SamplerFailed):
    """A tree sampler used one of the oracle's uniforms as a number (float(U)) instead of comparing it
    or drawing with it (specd.oracles.samplers.tree_uniforms): the oracle cannot integrate over such a use."""

    code = "uniform_used_as_a_number"

    def __init__(self, message: str):
        super().__init__(message, "uniform_used_as_a_number")


class SamplerNondeterministic(SamplerFailed):
    """A tree sampler did not retrace its own decisions when run again on the same uniforms: it has
    randomness of its own, which the oracle neither controls nor integrates over."""

    code = "sampler_nondeterministic"

    def __init__(self, message: str):
        super().__init__(message, "own_randomness")


# -- files ----------------------------------------------------------------------------
class BadTrace(UsageError):
    code = "bad_trace"


class ResumeMismatch(UsageError):
    """--resume into a file written by another run (another model, policy, seed or K policy)."""

    code = "resume_mismatch"


class KScheduleMismatch(UsageError):
    """--k-schedule replays a schedule that does not fit this run (another prompt, model or budget)."""

    code = "k_schedule_mismatch"


class OutputPathError(UsageError):
    """An output path that cannot take a regular file (a directory, a device, a missing or read-only folder)."""

    code = "output_path"


class WriteFailed(SpecdError):
    """Writing an output failed part-way (a full disk); the previous file is unchanged."""

    code = "write_failed"


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
