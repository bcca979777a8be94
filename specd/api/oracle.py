"""The oracle from Python: prove specd's engine exact (``prove``), or check any speculative sampler
(``check_sampler``), each returning an ``OracleReport``. ``specd verify-oracle`` is these two
functions and a renderer; its ``--json`` document is the report's ``document``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from specd.api import arguments as args
from specd.core.tree_shape import parse_tree
from specd.errors import UsageError, shown
from specd.oracles.fixture import OracleConfig
from specd.oracles.report import run_oracle, run_sampler_oracle
from specd.oracles.samplers.sandbox import DEFAULT_TIMEOUT


@dataclass(frozen=True)
class CheckResult:
    """One check's verdict. ``passed`` None: not applicable to what was checked; ``findings``: the
    named defects it found (the sampler oracle's)."""

    name: str
    passed: bool | None
    figures: dict
    detail: str
    findings: tuple[str, ...] = ()


@dataclass(frozen=True)
class OracleReport:
    """What the oracle found. ``passed``: no check failed (each passed, or was not applicable at this
    size: ``passed`` None, with the reason) and, for the engine, every known-wrong variant of the
    failure lab that can be seen at this size was caught (a row of ``failure_lab`` that cannot:
    ``caught`` None, ``applicable`` False, the reason in ``detail``); ``findings``: the named
    defects (a sampler's) or the names of the checks that failed (the engine's);
    ``counterexample``: the smallest case that shows the first failure, where the oracle looked
    for one; ``document``: the whole report, as ``specd verify-oracle --json`` prints it."""

    passed: bool
    checks: tuple[CheckResult, ...]
    findings: tuple[str, ...]
    counterexample: dict | None
    failure_lab: tuple[dict, ...]
    document: dict

    @property
    def failed(self) -> tuple[CheckResult, ...]:
        return tuple(c for c in self.checks if c.passed is False)

    @classmethod
    def _of(cls, document: dict) -> OracleReport:
        checks = tuple(
            CheckResult(c["name"], c["passed"], c["figures"], c["detail"], tuple(c.get("findings", ())))
            for c in document["checks"]
        )
        sampler = document.get("mode") == "sampler"
        findings = document["findings"] if sampler else [c.name for c in checks if c.passed is False]
        return cls(
            bool(document["passed"]),
            checks,
            tuple(findings),
            document.get("counterexample"),
            tuple(document.get("failure_lab", ())),
            document,
        )


def prove(
    vocab: int = 2,
    k: int = 3,
    *,
    rule: str = "both",
    seed: int = 0,
    horizon: int | None = None,
    samples: int = 2000,
    lab: bool = True,
    target_temperature: float = 1.0,
    draft_temperature: float = 0.7,
    target_bias: Mapping[int, float] | None = None,
    draft_bias: Mapping[int, float] | None = None,
    repetition_penalty: float | None = None,
    layout: str = "replay_frontier",
    backend: str = "max_shift",
    jobs: int | None = None,
    tree: str | Sequence[str] | None = None,
    **controls: float | int | None,
) -> OracleReport:
    """Prove specd's round exact on random tables over a vocabulary of ``vocab`` tokens with K = ``k``
    (``specd verify-oracle``): the emitted joint equals the target's, by exact enumeration and by
    Monte Carlo (``samples``), and the failure lab's known-wrong variants are all caught.
    ``rule``: maximal, invariant, block, both (the first two) or all. ``controls``: the target's
    further processors (min_p, presence_penalty, frequency_penalty, no_repeat_ngram_size). ``jobs``:
    processes the independent checks run on (default: the usable cores, at most 4, on Linux; 1 runs
    them all in this process; the report is the same). ``tree``: the token trees the tree checks
    enumerate (a ``--tree`` spec or several; None: small defaults; "none": no tree checks)."""
    arguments = dict(locals())
    jobs = args.whole(arguments.pop("jobs"), "jobs", optional=True)  # run_oracle checks >= 1
    return OracleReport._of(run_oracle(_config(arguments), jobs))


def check_sampler(
    sampler: Callable | str,
    *,
    rule: str = "maximal",
    tree: str | None = None,
    vocab: int = 2,
    k: int = 3,
    seed: int = 0,
    target_temperature: float = 1.0,
    draft_temperature: float = 0.7,
    target_bias: Mapping[int, float] | None = None,
    draft_bias: Mapping[int, float] | None = None,
    repetition_penalty: float | None = None,
    input_rounding: float = 0.0,
    timeout: float = DEFAULT_TIMEOUT,
    jobs: int | None = None,
    exact_size: bool = False,
    **controls: float | int | None,
) -> OracleReport:
    """Check a speculative sampler against the exact law (``specd verify-oracle --sampler``).

    ``sampler``: a callable under the sampler protocol ``sampler(p, q, drafts, k_lens, accept_u,
    terminal_u) -> (accepted, terminal)`` (specd.oracles.samplers.protocol states it), a class built with
    no arguments, a shipped adapter's name ("specd", "specd-block", "hf", "hf-ensemble"),
    "module:attr" or "path/to/file.py:attr". ``rule``: the rule it claims, maximal (token-wise) or block; the fixture's
    options are ``prove``'s. ``input_rounding``: the relative change the sampler's own handling
    does to the rows before it decides (about 1e-15 for one that takes log p and softmaxes it
    back): decisions that close to a boundary are reported as inconclusive, not as wrong.

    ``tree``: a tree shape, as ``--tree`` takes it ("2,2", "iid:2,2", a choices file): ``sampler`` is
    then a tree sampler, ``sampler(tokens, parents, depths, p, q, drawn, u) -> (path, terminal)``
    (specd.oracles.samplers.tree_protocol states it; shipped: "specd", "specinfer", "rrs", "sglang",
    "sglang@0.5,1", "eagle", "trtllm", "trtllm-12588", "llamacpp", "medusa-typical"), checked over
    every draft tree of the constructions the shape names (all four without a prefix); K is the
    tree's depth. The exact check runs at the size named and at the smallest sizes where each class
    of slip can show, over ten tables (``exact_size``: the named size only, each class it cannot
    show not applicable); ``document["coverage"]`` says what was covered, its ``claim`` what was proved.

    The sampler runs in a process of its own (on Linux, unless this process has initialized CUDA):
    a call that ends that process (``os._exit``, a crash), forks it, or does not return within
    ``timeout`` seconds fails the check it was in, naming it (``exited``, ``crashed``, ``forked``,
    ``timed_out``), and this process carries on to its report; what the sampler prints goes to
    standard error. Its process is a fork of this one: the sampler sees this process's state, and
    what it changes there stays there. ``jobs``: with ``tree``, how many such processes share the
    rounds (default: the usable cores, at most 4; the report is the same)."""
    arguments = {**locals(), "lab": False}
    jobs = args.whole(arguments.pop("jobs"), "jobs", optional=True)  # run_sampler_oracle checks >= 1
    rounding = args.number(arguments.pop("input_rounding"), "input_rounding")
    if not 0 <= rounding < 1:
        raise UsageError(f"input_rounding is a relative change in [0, 1), got {shown(rounding)}")
    limit = args.number(arguments.pop("timeout"), "timeout")
    if limit <= 0:
        raise UsageError(f"timeout must be a number of seconds > 0, got {shown(limit)}")
    tree = arguments.pop("tree")
    exact_size = args.flag(arguments.pop("exact_size"), "exact_size")
    if tree is not None:
        parse_tree(tree, "tree")  # refused by name before the sampler's module is imported
        arguments["k"] = 1  # the tree's depth takes its place
    report = run_sampler_oracle(_config(arguments), sampler, rounding, limit, tree, jobs, exact_size)
    return OracleReport._of(report)


WHOLE = ("vocab", "k", "seed", "samples")  # the fixture's integers; its optional ones: horizon, jobs
NUMBERS = ("target_temperature", "draft_temperature")
TEXTS = ("rule", "layout", "backend")
CONTROLS = ("min_p", "presence_penalty", "frequency_penalty", "no_repeat_ngram_size")  # **controls' names


def _trees(value) -> tuple[str, ...]:
    """``prove``'s ``tree``: one spec (a string), several (a list or tuple of strings), or None."""
    if value is None:
        return ()
    specs = (value,) if isinstance(value, str) else value
    if not isinstance(specs, (list, tuple)):
        raise UsageError(f"tree must be a tree spec or a list of them, got {shown(value)} ({type(value).__name__})")
    for spec in specs:
        if spec != "none":
            parse_tree(spec, "tree")  # its type and its size, by name, before any enumeration
    return tuple(specs)


def _config(arguments: dict) -> OracleConfig:
    """The oracle's fixture from a call's arguments (its extra keywords: the target's controls),
    each argument's type checked by name (the fixture checks the ranges)."""
    controls = arguments.pop("controls")
    arguments.pop("sampler", None)
    given = lambda names: (name for name in names if name in arguments)  # noqa: E731 - check_sampler has fewer
    for name in given(WHOLE):
        args.whole(arguments[name], name)
    args.whole(arguments.get("horizon"), "horizon", optional=True)
    for name in given(NUMBERS):  # types here; ranges (finite, positive) in the fixture, named by their flags
        args.number(arguments[name], name, finite=False)
    args.number(arguments["repetition_penalty"], "repetition_penalty", optional=True, finite=False)
    for name in given(TEXTS):
        args.text(arguments[name], name)
    args.flag(arguments["lab"], "lab")
    for name in ("target_bias", "draft_bias"):
        arguments[name] = args.biases(arguments[name], name)
    for name, value in controls.items():
        if name not in CONTROLS:
            raise UsageError(f"unknown option {shown(name)}; the target's controls are {', '.join(CONTROLS)}")
        args.number(value, name, optional=True, finite=False)
    if "tree" in arguments:  # prove's: one spec, several, or None (the defaults)
        arguments["tree"] = _trees(arguments["tree"])
    return OracleConfig(**arguments, controls={n: v for n, v in controls.items() if v is not None})
