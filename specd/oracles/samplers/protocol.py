"""Samplers under test: the protocol any speculative sampler is checked through, and the
shipped adapters (specd's own rule, Hugging Face's ``_speculative_sampling``).

The protocol. A sampler is a callable (a function, or a class whose instances are
callable, built with no arguments) taking one batch of rounds:

    sampler(p, q, drafts, k_lens, accept_u, terminal_u)

    p          float[B, K+1, V]    the target's rows p_1..p_{K+1} along each row's drafts (past a
                                   row's p_{k+1}: rows that are not its own)
    q          float[B, K, V]      the draft's rows q_1..q_K that drew the drafts (zeros past k)
                                   (float64; dtype_edges also passes float32, bfloat16, float16)
    drafts     int64[B, K]         the drafted tokens d_1..d_K (-1 past k)
    k_lens     int64[B]            drafts per row (0: no drafts, a plain target step)
    accept_u   float64[B, K]       the acceptance uniforms U_1..U_K in [0, 1)
    terminal_u float64[B]          the uniform for the correction or bonus token

and returning ``(accepted, terminal)``: accepted int64[B] is how many drafts each
row keeps; terminal is either the token each row emits after them, drawn with
terminal_u (int64[B]), or the distribution it is drawn from (float[B, V]). A
mapping with keys ``accepted`` and ``terminal`` or ``terminal_rows`` works too.
Raising is how a sampler refuses an input (an impossible draft with q(d) = 0).
The uniforms are read as the rule reads them (the checks compare outcomes uniform by
uniform): draft i is kept while U_i < p_i(d_i) / q_i(d_i), and the token is the inverse
CDF at terminal_u in token order.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import os
import re
import sys
from collections.abc import Callable, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from unittest import mock

import torch

from specd.core.sampler import RejectionSampler, Rows
from specd.errors import SamplerFailed, SamplerUnavailable, SamplerUnloadable, UsageError, one_line, shown


@dataclass(frozen=True)
class SamplerResult:
    accepted: list[int]
    terminal: list[int] | None  # tokens drawn with the terminal uniforms, when the sampler gives tokens
    terminal_rows: torch.Tensor | None  # float64[B, V] normalized, when it gives distributions


class SamplerUnderTest:
    """``input_rounding``: the relative change the rows may suffer on their way into the sampler
    (0 when it takes the rows as given). Decisions within it of a boundary say nothing about
    the sampler itself, and dtype_edges reports them as inconclusive."""

    def __init__(self, name: str, fn: Callable, description: str, input_rounding: float = 0.0):
        self.name = name
        self.fn = fn
        self.description = description
        self.input_rounding = input_rounding

    def __call__(self, p, q, drafts, k_lens, accept_u, terminal_u) -> SamplerResult:
        """Call the sampler on one batch, in this process (specd.oracles.samplers.sandbox calls it in a child
        process of its own). Whatever it raises comes back as SamplerFailed (the checks decide what
        a refusal means), as does a result that cannot even be read (an object whose attributes
        raise), so a fault of the harness is never blamed on it, nor one of the sampler on specd."""
        with isolated(f"sampler {self.name}"):
            out = self.fn(p, q, drafts, k_lens, accept_u, terminal_u)
        try:
            return normalize_result(self.name, out, drafts.shape[0], p.shape[-1], int(drafts.shape[1]))
        except SamplerFailed:
            raise
        except (Exception, SystemExit) as err:  # noqa: BLE001 - reading its result ran its code
            raise SamplerFailed(
                f"sampler {self.name} returned something that cannot be read as (accepted, terminal): {described(err)}",
                "returned_unreadable",
            ) from None


def isolated(what: str, passthrough: tuple[type, ...] = ()) -> _Isolated:
    """Run user code: whatever it raises, ``SystemExit`` (``sys.exit``) included, comes back as one
    SamplerFailed naming ``what``, so code under test that exits can never end specd with exit 0.
    Ctrl-C still interrupts; ``passthrough``: errors of the caller's own, raised as they are."""
    return _Isolated(what, passthrough)


class _Isolated:
    """``isolated``'s context (a class, not a generator: the oracle enters one per run of a sampler, up to
    a million a check)."""

    __slots__ = ("what", "passthrough")

    def __init__(self, what: str, passthrough: tuple[type, ...]):
        self.what, self.passthrough = what, passthrough

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind, err, _traceback) -> bool:
        if kind is None or issubclass(kind, self.passthrough) or issubclass(kind, SamplerFailed):
            return False
        if err is None:
            err = kind()
        if issubclass(kind, SystemExit):
            raise SamplerFailed(
                f"{self.what} exited (SystemExit {shown(err.code)}) instead of returning", "exited"
            ) from None
        if issubclass(kind, Exception):  # the code under test can fail in any way
            raise SamplerFailed(f"{self.what} raised {described(err)}", "raised") from None
        return False  # Ctrl-C and the like: as they are


def described(err: BaseException) -> str:
    """An exception of the code under test in a few words: its type and its message (whose own
    ``__str__`` may raise too)."""
    try:
        message = one_line(str(err), 200)
    except Exception:  # noqa: BLE001 - its __str__ is the code under test too
        message = "(its message cannot be read)"
    return f"{type(err).__name__}: {message}"


@contextmanager
def loading(what: str):
    """Load user code (import a module, build a class): whatever it raises is one SamplerUnloadable
    line (exit 2: the sampler cannot be checked at all), never a failed check."""
    try:
        with isolated(what, passthrough=(UsageError,)):
            yield
    except SamplerFailed as err:
        raise SamplerUnloadable(f"cannot load the sampler: {err}") from None


def _tensor(name: str, what: str, value) -> torch.Tensor:
    if value is None or isinstance(value, (str, bytes)):
        raise SamplerFailed(
            f"sampler {name} returned {what} of type {type(value).__name__}; expected a tensor", "returned_not_a_tensor"
        )
    try:
        tensor = torch.as_tensor(value)
    except (TypeError, ValueError, RuntimeError) as err:
        raise SamplerFailed(
            f"sampler {name} returned {what} that is not a tensor ({one_line(str(err), 120)})", "returned_not_a_tensor"
        ) from None
    if tensor.device.type == "meta":
        raise SamplerFailed(f"sampler {name} returned {what} on the meta device (no values)", "returned_meta_tensor")
    if tensor.is_complex():
        raise SamplerFailed(
            f"sampler {name} returned {what} of dtype {tensor.dtype}; expected real numbers", "returned_complex"
        )
    return tensor.detach().as_subclass(torch.Tensor).cpu()  # a plain tensor: its subclass's code stays out


def normalize_result(name: str, out, batch: int, vocab: int, k: int | None = None) -> SamplerResult:
    """Whatever shape of the protocol the sampler returned -> SamplerResult, or SamplerFailed naming
    what was wrong: a missing part, a type, a shape, a count outside 0..K, a token outside the
    vocabulary, a distribution that is not finite, non-negative and of positive mass."""
    if isinstance(out, Mapping):
        if "accepted" not in out or not ({"terminal", "terminal_rows"} & set(out)):
            raise SamplerFailed(f"sampler {name} returned a mapping without 'accepted' and 'terminal'", "missing_parts")
        accepted, terminal = out.get("accepted"), out.get("terminal", out.get("terminal_rows"))
    elif hasattr(out, "accepted") and hasattr(out, "terminal_rows"):  # e.g. specd's Decision
        accepted, terminal = out.accepted, out.terminal_rows
    elif isinstance(out, (tuple, list)) and len(out) == 2:
        accepted, terminal = out
    else:
        raise SamplerFailed(
            f"sampler {name} returned {type(out).__name__}; expected (accepted, terminal)", "returned_wrong_type"
        )
    accepted = _tensor(name, "accepted counts", accepted).reshape(-1)
    terminal = _tensor(name, "a terminal", terminal)
    if accepted.numel() != batch:
        raise SamplerFailed(
            f"sampler {name} returned {accepted.numel()} accepted counts for a batch of {batch}", "count_shape_wrong"
        )
    if accepted.is_floating_point() or accepted.is_complex() or accepted.dtype == torch.bool:
        raise SamplerFailed(
            f"sampler {name} returned accepted counts of dtype {accepted.dtype}; expected integers",
            "count_not_integer",
        )
    if accepted.numel() and (accepted.min() < 0 or (k is not None and accepted.max() > k)):
        raise SamplerFailed(
            f"sampler {name} returned accepted counts {accepted.tolist()} outside 0..{k}", "count_out_of_range"
        )
    if terminal.dim() == 2 and terminal.shape == (batch, vocab) and terminal.is_floating_point():
        rows = terminal.to(torch.float64)
        mass = rows.sum(-1, keepdim=True)
        if not bool(torch.isfinite(rows).all()) or bool((rows < 0).any()) or not bool((mass > 0).all()):
            raise SamplerFailed(
                f"sampler {name} returned terminal distributions that are not finite, non-negative rows of "
                "positive mass",
                "returned_non_finite_rows",
            )
        return SamplerResult(accepted.tolist(), None, rows / mass)
    if terminal.numel() == batch and not terminal.is_floating_point() and terminal.dtype != torch.bool:
        tokens = terminal.reshape(-1)
        if tokens.numel() and (tokens.min() < 0 or tokens.max() >= vocab):
            raise SamplerFailed(
                f"sampler {name} returned terminal tokens {tokens.tolist()} outside 0..{vocab - 1}",
                "token_out_of_range",
            )
        return SamplerResult(accepted.tolist(), tokens.tolist(), None)
    raise SamplerFailed(
        f"sampler {name} returned a terminal of shape {tuple(terminal.shape)}; expected tokens [{batch}] "
        f"or distributions [{batch}, {vocab}]",
        "terminal_shape_wrong",
    )


# -- specd's own rule ----------------------------------------------------------------------------
def rule_sampler(rule=None, block: bool = False) -> Callable:
    """A ``RejectionSampler`` (specd's production rule, or a failure-lab variant of it) under the
    protocol: its decision (the token-wise rule, or with ``block`` block verification), then its
    terminal draw. This adapter and the rule objects are the only places that call it."""
    rule = rule or RejectionSampler()

    def sampler(p, q, drafts, k_lens, accept_u, terminal_u):
        rows = Rows.dense(p, q, drafts, k_lens)
        decision = rule.decide_block(rows, accept_u) if block else rule.decide(rows, accept_u)
        return decision.accepted, rule.sample_terminal(decision.terminal_rows, terminal_u)

    return sampler


# -- Hugging Face's assisted generation ------------------------------------------------------------
def hf_function():
    """transformers' ``_speculative_sampling``, or SamplerUnavailable naming what is missing."""
    try:
        import transformers
        from transformers.generation.utils import _speculative_sampling
    except ImportError:
        raise SamplerUnavailable(
            "the hf adapter needs transformers' _speculative_sampling, which the installed transformers lacks"
        ) from None
    return transformers.__version__, _speculative_sampling


def hf_sampler(ensemble_weight: float | None = None) -> Callable:
    """Drive transformers' ``_speculative_sampling`` with injected uniforms, without editing it.

    It takes logits and draws its own randomness: log(p) and log(q) give back p and q
    under its softmax; ``torch.rand_like`` is made to return the acceptance uniforms and
    ``torch.multinomial`` to record the distribution it samples the terminal token from
    (returned as the terminal). It is called as assisted generation calls it: the
    sequence so far (a two-token prompt) followed by the drafts, one candidate length.
    """
    _, fn = hf_function()

    def sampler(p, q, drafts, k_lens, accept_u, terminal_u):
        # one candidate length, the rows' own (assisted generation never pads one past its drafts)
        k = int(k_lens[0]) if len(set(k_lens.tolist())) == 1 else int(drafts.shape[1])
        drafts, q, p = drafts[:, :k], q[:, :k], p[:, : k + 1]
        captured = {}

        def rand_like(t, *args, **kwargs):
            return accept_u[:, :k].to(dtype=t.dtype).reshape(t.shape)

        def multinomial(rows, num_samples, *args, **kwargs):
            captured["rows"] = rows.detach().clone()
            return torch.zeros(rows.shape[0], num_samples, dtype=torch.long)

        ids = torch.cat([torch.zeros(drafts.shape[0], 2, dtype=torch.long), drafts.clamp_min(0)], dim=1)
        kwargs = {} if ensemble_weight is None else {"assistant_ensemble_weight": ensemble_weight}
        logits_q, logits_p = q.to(torch.float64).log(), p.to(torch.float64).log()
        with mock.patch.object(torch, "rand_like", rand_like), mock.patch.object(torch, "multinomial", multinomial):
            _, n_matches = fn(ids, logits_q, k, logits_p, **kwargs)
        return torch.as_tensor(n_matches).reshape(-1).expand(drafts.shape[0]), captured["rows"]

    return sampler


HF_INPUT_ROUNDING = 1e-15  # log then softmax moves a row by a few float64 steps
SHIPPED = {
    "specd": (rule_sampler, "specd's production rule (specd.core.sampler.RejectionSampler)", 0.0),
    "specd-block": (
        lambda: rule_sampler(block=True),
        "specd's block verification (specd.core.block; check it with --rule block)",
        0.0,
    ),
    "hf": (
        lambda: hf_sampler(),
        "transformers' _speculative_sampling (assisted generation with do_sample)",
        HF_INPUT_ROUNDING,
    ),
    "hf-ensemble": (
        lambda: hf_sampler(0.5),
        "transformers' _speculative_sampling with assistant_ensemble_weight=0.5 (a lossy mode)",
        HF_INPUT_ROUNDING,
    ),
}


def load_sampler(spec: str) -> SamplerUnderTest:
    """A shipped adapter by name, ``module:attr`` imported, or ``path/to/file.py:attr`` loaded from that
    file (importing or loading runs its code)."""
    if spec in SHIPPED:
        build, description, rounding = SHIPPED[spec]
        if spec.startswith("hf"):
            version, _ = hf_function()
            description += f", transformers {version}"
        return SamplerUnderTest(spec, build(), description, rounding)
    where, sep, attr = spec.rpartition(":")
    if not sep or not where or not attr:
        raise UsageError(
            f"--sampler takes module:attr, path/to/file.py:attr or one of {', '.join(SHIPPED)}; got {shown(spec)}"
        )
    module = _load_file(spec, where) if is_file_spec(spec) else _import(spec, where)
    obj = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise UsageError(f"{shown(where)} has no attribute {shown(attr)}")
        obj = getattr(obj, part)
    return as_sampler(obj, spec)


def is_file_spec(spec: str) -> bool:
    """Whether ``--sampler`` names a file (``path/to/file.py:attr``) rather than a module to import."""
    where = spec.rpartition(":")[0]
    return where.endswith(".py") or "/" in where or os.sep in where


def _import(spec: str, module_name: str):
    """``module:attr``'s module, imported from beside the user or the Python path."""
    added = os.getcwd() not in sys.path  # a module beside the user, as `python -m` would find it
    if added:
        sys.path.insert(0, os.getcwd())
    if not re.fullmatch(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*", module_name):
        raise UsageError(f"--sampler {shown(spec)}: {shown(module_name)} is not a Python module name")
    try:
        with loading(f"the sampler module {shown(module_name)}, on import,"):
            try:
                found = importlib.util.find_spec(module_name)  # imports the parent packages
            except ModuleNotFoundError:
                found = None
            if found is None:
                raise UsageError(
                    f"cannot import the sampler module {shown(module_name)}: no such module (looked beside you and on "
                    "the Python path)"
                )
            return importlib.import_module(module_name)
    finally:
        if added:
            sys.path.remove(os.getcwd())


def _load_file(spec: str, path_text: str):
    """``path/to/file.py:attr``'s file, loaded as a module of its own (its folder on the Python path while
    it loads, as ``python path/to/file.py`` has it, so it can import what lies beside it)."""
    path = os.path.abspath(os.path.expanduser(path_text))
    if not os.path.isfile(path):
        raise UsageError(f"--sampler {shown(spec)}: no such file {shown(path_text)}")
    stem = re.sub(r"\W", "_", os.path.basename(path).removesuffix(".py"))
    name = f"specd_sampler_{stem}"
    found = importlib.util.spec_from_file_location(name, path)
    if found is None or found.loader is None:
        raise UsageError(f"--sampler {shown(spec)}: {shown(path_text)} is not a Python file")
    module = importlib.util.module_from_spec(found)
    folder = os.path.dirname(path)
    added = folder not in sys.path
    if added:
        sys.path.insert(0, folder)
    sys.modules[name] = module  # as an import would: what it defines can find its module
    try:
        with loading(f"the sampler file {shown(path_text)}, on loading,"):
            found.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    finally:
        if added and folder in sys.path:
            sys.path.remove(folder)
    return module


def as_sampler(obj, name: str | None = None, input_rounding: float = 0.0) -> SamplerUnderTest:
    """A function, or a class built here with no arguments, under the protocol; ``name``: how the
    report names it (default: its qualified name); ``input_rounding``: see SamplerUnderTest."""
    name = name or getattr(obj, "__qualname__", None) or type(obj).__name__
    if inspect.isclass(obj):
        with loading(f"building the sampler {name} with no arguments"):
            obj = obj()
    if not callable(obj):
        raise UsageError(f"{name} is not callable; a sampler is a function or a class with __call__")
    doc = (inspect.getdoc(obj) or "").strip().splitlines()
    return SamplerUnderTest(name, obj, doc[0] if doc else name, input_rounding)
