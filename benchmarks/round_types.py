"""Which of specd's types one speculative round touches: every class whose method (its
constructor included) runs during a round, found with a profiler hook. A tiny table-model pair,
a sampled draft model, K = 3, the acceptance log on, two requests; the first round (prefill
excluded) is what is counted.

    python benchmarks/round_types.py            # this checkout
    python benchmarks/round_types.py --json     # one JSON document
Run it in a worktree of another commit to compare (the engine's helpers it uses exist in both).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import is_dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from specd.core.round import speculative_round  # noqa: E402
from specd.core.state import Request  # noqa: E402
from tests.helpers import table_engine  # noqa: E402


def touched(rule: str = "maximal", temperature: float = 1.0) -> dict[str, str]:
    """Class name -> "record" (a dataclass or named tuple) or "object", for one round."""
    session = table_engine(k=3, record_log=True, rule=rule, target_temperature=temperature).start(
        [Request("a", (0, 1, 2), 8, seed=1), Request("b", (3, 1), 8, seed=2)]
    )
    seen: dict[str, str] = {}

    def hook(frame, event, arg):
        if event != "call":
            return
        holder = frame.f_locals.get("self", frame.f_locals.get("cls"))
        cls = holder if isinstance(holder, type) else type(holder) if holder is not None else None
        if cls is not None and cls.__module__.startswith("specd."):
            record = is_dataclass(cls) or (issubclass(cls, tuple) and hasattr(cls, "_fields"))
            seen[f"{cls.__module__.removeprefix('specd.')}.{cls.__qualname__}"] = "record" if record else "object"

    sys.setprofile(hook)
    try:
        speculative_round(session)
    finally:
        sys.setprofile(None)
    return dict(sorted(seen.items()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    runs = {"sampled (maximal)": touched(), "greedy": touched(temperature=0.0), "invariant": touched("invariant")}
    if args.json:
        print(json.dumps(runs, indent=2))
        return
    for name, types in runs.items():
        records = [t for t, kind in types.items() if kind == "record"]
        print(f"{name}: {len(types)} types, {len(records)} of them records")
        print("  records: " + ", ".join(t.rsplit(".", 1)[1] for t in records))
        print("  objects: " + ", ".join(t.rsplit(".", 1)[1] for t, kind in types.items() if kind == "object"))


if __name__ == "__main__":
    main()
