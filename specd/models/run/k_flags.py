"""The K and tree options a run would silently ignore, refused by name: any of them in target-only
decoding (it drafts nothing), ``-k`` or ``--k-max`` beside a ``--k-schedule`` (the schedule fixes every
round's K), ``--k-max`` beside a fixed ``-k`` or a fixed ``--tree`` (its depth is each round's K;
``--tree auto`` is ``-k auto`` choosing, which ``--k-max`` bounds). The command line (flags typed or in
the config file) and ``specd.Pair`` (the keywords of a call) check the same."""

from __future__ import annotations

from specd.errors import UsageError
from specd.models.run.option_checks import AUTO_TREE
from specd.models.run.options import GenerateOptions

K_FLAGS = ("k", "k_max", "draft_stop", "k_schedule", "tree", "tree_budget")


def check_k_flags(options: GenerateOptions, given: set[str], baseline: bool, baseline_name: str = "--baseline") -> None:
    """Refuse the K flags of ``given`` (the options the user set, by field name) that would have no
    effect on this run (module docstring); ``baseline_name``: how target-only decoding was asked for."""
    k_flags = [n for n in K_FLAGS if n in given and getattr(options, n) is not None]
    if baseline and k_flags:
        raise UsageError(
            f"{options.where(k_flags[0])} needs a draft: target-only decoding ({baseline_name}) drafts nothing"
        )
    if options.k_schedule is not None and "k" in given:
        raise UsageError("give -k or --k-schedule, not both (the schedule says K for every round)")
    if options.k_schedule is not None and "k_max" in given:
        raise UsageError(
            f"{options.where('k_max')} bounds -k auto; a --k-schedule replays the K of every round as recorded, "
            "so it would have no effect"
        )
    if "k_max" in given and not options.auto_k:
        raise UsageError(f"{options.where('k_max')} bounds -k auto; with a fixed -k {options.k} it has no effect")
    if "k_max" in given and options.tree not in (None, AUTO_TREE):
        raise UsageError(
            f"{options.where('k_max')} bounds -k auto's K; {options.where('tree')} {options.tree} fixes each round's "
            "depth (its K), so it would have no effect (--tree auto takes it)"
        )
