"""Token trees change only the speed, never the text: checked on the embedded model and real prompts.

    python benchmarks/tree_text.py [--model smollm|gemma] [--half test] [--trees 2,2,1;3,1,1;nodes=8]
                                   [--max-new-tokens 64] [--ids 200] [--sampled-tokens 24]

Two checks, each counted and printed (not a timing):

1. greedy: for every prompt of ``benchmarks/corpus/{half}.jsonl``, Hugging Face ``model.generate``
   greedy against ``specd generate --tree SPEC`` (greedy) for each tree: the token ids must be equal;
   each difference is printed with the index where the texts part.
2. invariant: for ``--ids`` request ids (the test half's prompts in turn, seed 0, temperature 0.7),
   specd target-only sampling against each tree under the default invariant rule: the seed decides the
   text, so every text must be equal.

The trees draft from the model's own bfloat16 copy (``self:bf16``: a draft that can branch; the
embedded Gemma 3's default shared-body draft drafts chains only) and the suffix lookup.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from arguments import positive  # noqa: E402
from grounded import hf_generate  # noqa: E402

from specd.models.run.options import GenerateOptions  # noqa: E402
from specd.models.run.pipeline import Pipeline  # noqa: E402
from specd.models.run.prompts import prompt_items  # noqa: E402

CORPUS = Path(__file__).resolve().parent / "corpus"
TARGETS = {"smollm": "embedded:smollm2-135m", "gemma": "embedded:gemma-3-270m"}
DRAFT = "suffix,self:bf16"


def first_difference(a, b) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", choices=sorted(TARGETS), default="smollm")
    ap.add_argument("--half", choices=("test", "fit"), default="test")
    ap.add_argument("--trees", default="2,2,1;3,1,1;nodes=8", help="tree specs, separated by ';'")
    ap.add_argument("--max-new-tokens", type=positive, default=64)
    ap.add_argument("--ids", type=positive, default=200)
    ap.add_argument("--sampled-tokens", type=positive, default=24)
    args = ap.parse_args()
    trees = [t for t in args.trees.split(";") if t]
    items = prompt_items([], str(CORPUS / f"{args.half}.jsonl"))
    base = Pipeline.build(
        GenerateOptions(
            target=TARGETS[args.model], draft=DRAFT, max_new_tokens=args.max_new_tokens, temperature=0.0, backend="hf"
        )
    )
    model = base.target.model
    differ = 0
    print(f"greedy, {len(items)} prompts of the {args.half} half, {args.max_new_tokens} new tokens, draft {DRAFT}")
    for item in items:
        ids = list(base.encode(item))
        hf, _ = hf_generate(model, ids, args.max_new_tokens)
        for spec in trees:
            pipe = base.with_options(dataclasses.replace(base.options, tree=spec))
            mine = pipe.run([item], k="auto", record_log=False).results[0].tokens
            if tuple(mine) != tuple(hf):
                differ += 1
                print(f"  {item.request_id} --tree {spec}: parts from HF greedy at token {first_difference(mine, hf)}")
    print(f"greedy: {differ} of {len(items) * len(trees)} (prompt, tree) runs differ from HF greedy")

    sampled = base.with_options(
        dataclasses.replace(base.options, temperature=0.7, seed=0, max_new_tokens=args.sampled_tokens)
    )
    requests = [dataclasses.replace(items[i % len(items)], request_id=f"id-{i}") for i in range(args.ids)]
    expected = [r.tokens for r in sampled.run(requests, baseline=True, record_log=False).results]
    for spec in trees:
        pipe = sampled.with_options(dataclasses.replace(sampled.options, tree=spec))
        got = [r.tokens for r in pipe.run(requests, k="auto", record_log=False).results]
        same = sum(a == b for a, b in zip(got, expected))
        print(f"invariant, --tree {spec}: {same} of {len(requests)} request ids give target-only sampling's text")
    return 1 if differ else 0


if __name__ == "__main__":
    raise SystemExit(main())
