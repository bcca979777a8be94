"""A linear layer's product form on a CPU, chosen per row count by timing.

On a CPU, y = x W^T + b for a few rows x float[M, D] and a weight W float[N, D] runs
through BLAS in one of two forms: the plain one (``F.linear``: [M, D] x [D, N]) or the
transposed one ((W x^T)^T: [N, D] x [D, M], one pass over W for all M rows). Which is
faster depends on the BLAS build, the processor, the thread count and M, and by a lot:
on this project's 2-core AMD EPYC machine with torch 2.13's MKL, SmolLM2-135M's 210
body products take 38 ms for one row and 55 ms for two in the plain form, 27 ms for
two in the transposed one; on the Intel machine of earlier measurements the head's
forms ran the other way round. For a free draft the cost of a verify call by row
count decides K, so this is a decision about speculation, not only about speed.

``ProductForms`` decides per class (weight shape, dtype, M, torch's thread count):
while a class is undecided its products alternate between the two forms and are timed
(a model call at a new M gives each body shape 15 timings of each form, taken side
by side under the same load); once each form has SAMPLES timings, the transposed form
is kept if its median is below MARGIN times the plain one's. No call is spent on
timing: every timed product is one the model needed. A single row runs the transposed
form as two (the one-column product is the slow GEMV path there).

Only inside ``engaged()`` (specd's own model calls): the model is the user's object,
and Hugging Face's own ``generate`` on it computes exactly what it always did. The
two forms differ in rounding only (like any two row counts of the plain form), so the
emitted tokens are those of the target; greedy outputs are checked token for token
against Hugging Face's in the tests and the benchmarks.
"""

from __future__ import annotations

import statistics
import threading
import time

import torch
import torch.nn.functional as F

PLAIN, TRANSPOSED = "plain", "transposed"
SAMPLES = 3  # timings of each form before a class is decided
MARGIN = 0.9  # the transposed form must be this much faster to replace the library's own
MAX_ROWS = 512  # larger products (a long prompt's prefill) keep the plain form, untimed


def plain(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """x float[M, D], weight float[N, D], bias float[N] or None -> float[M, N]: F.linear."""
    return F.linear(x, weight, bias)


def transposed(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """The same product as ``plain`` computed as (W x^T)^T (contiguous); one row runs as two."""
    rows = x.shape[0]
    src = torch.cat([x, x]) if rows == 1 else x.contiguous()
    out = torch.mm(weight, src.t()).t()[:rows].contiguous()
    return out + bias if bias is not None else out


FORMS = {PLAIN: plain, TRANSPOSED: transposed}


class ProductForms:
    """The chosen product form of every class of linear products of one model (see the module
    docstring). ``clock``: seconds, for timing (tests pass their own).

    Thread-safe: whether products are engaged is each thread's own (another thread's plain call,
    Hugging Face's ``generate`` say, stays plain), and a class's timings are recorded and decided
    under a lock (two threads deciding one class at once found its timings gone: a KeyError)."""

    def __init__(self, clock=time.perf_counter):
        self.clock = clock
        self.chosen: dict[tuple, str] = {}
        self.timings: dict[tuple, dict[str, list[float]]] = {}
        self._local = threading.local()
        self._lock = threading.Lock()

    def __getstate__(self) -> dict:
        """A copy (a deep copy of the model carries its forms) has its own lock and engagement."""
        return {"clock": self.clock, "chosen": dict(self.chosen), "timings": self.timings}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["clock"])
        self.chosen.update(state["chosen"])
        self.timings.update(state["timings"])

    @property
    def active(self) -> bool:
        return bool(getattr(self._local, "threads", 0))

    def engaged(self) -> _Engaged:
        """Products inside run in their chosen forms (specd's own calls); outside, plainly."""
        return _Engaged(self._local)

    def product(self, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        """x float[..., D] -> float[..., N], in the form chosen for its class (timed while undecided).
        A model call runs every linear product through here, so the decided plain form, the common
        one, is one lookup and ``F.linear`` on ``x`` as it is."""
        threads = getattr(self._local, "threads", 0)  # 0: not engaged (torch's count while engaged)
        rows = x.shape[:-1].numel() if threads else 0
        if rows == 0 or rows > MAX_ROWS:
            return F.linear(x, weight, bias)
        key = (weight.shape, weight.dtype, rows, threads)
        form = self.chosen.get(key)
        if form == PLAIN:
            return F.linear(x, weight, bias)
        flat = x.reshape(rows, x.shape[-1])
        if form is None:
            with self._lock:
                form = self.chosen.get(key)  # another thread may have decided the class since
                if form is None:
                    seen = self.timings.setdefault(key, {PLAIN: [], TRANSPOSED: []})
                    trial = TRANSPOSED if len(seen[TRANSPOSED]) <= len(seen[PLAIN]) else PLAIN
        if form is not None:
            return FORMS[form](flat, weight, bias).reshape(*x.shape[:-1], -1)
        started = self.clock()
        out = FORMS[trial](flat, weight, bias)
        elapsed = self.clock() - started
        with self._lock:
            seen[trial].append(elapsed)
            if key not in self.chosen and min(len(v) for v in seen.values()) >= SAMPLES:
                faster = statistics.median(seen[TRANSPOSED]) < MARGIN * statistics.median(seen[PLAIN])
                self.chosen[key] = TRANSPOSED if faster else PLAIN
                self.timings.pop(key, None)
        return out.reshape(*x.shape[:-1], -1)


class _Engaged:
    """``ProductForms.engaged``'s context (a class: entered once per model call)."""

    __slots__ = ("local", "before")

    def __init__(self, local: threading.local) -> None:
        self.local = local

    def __enter__(self) -> None:
        # torch's thread count, read once a call: a class is decided per count
        self.before, self.local.threads = getattr(self.local, "threads", 0), torch.get_num_threads()

    def __exit__(self, *exc) -> None:
        self.local.threads = self.before


class FormedForward:
    """A linear module's forward through its model's ``ProductForms`` (an instance attribute, so a
    deep copy of the model carries a copy that points at the copied module and forms)."""

    def __init__(self, forms: ProductForms, module: torch.nn.Linear):
        self.forms = forms
        self.module = module

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return self.forms.product(x, self.module.weight, self.module.bias)


def forms_of(model: torch.nn.Module) -> ProductForms:
    """The model's ``ProductForms``, installed on every ``nn.Linear`` in it on first use. A module
    already installed (shared with another view of the same weights) keeps its forms, and one
    whose forward something else replaced (accelerate's hooks) is left alone."""
    linears = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
    installed = [m.__dict__["forward"] for m in linears if isinstance(m.__dict__.get("forward"), FormedForward)]
    forms = installed[0].forms if installed else ProductForms()
    for module in linears:
        if "forward" not in module.__dict__:
            module.forward = FormedForward(forms, module)
    return forms
