"""llama.cpp's CPU batch invariance: is a position's logit row the same whatever call it is scored in?

    python benchmarks/llamacpp_invariance.py [--models smollm,gemma] [--configs all|NAME;...] [--threads 2]
                                             [--json FILE]

Bit-identity, not timing: it may run on a busy machine. Per model file (the embedded SmolLM2 Q4_1
and Gemma 3 270M Q4_K_M GGUFs) and per context configuration (CONFIGS: llama.cpp's defaults with
flash attention on and off, one pool of K/V cells for every sequence, float16 keys; and specd's:
a K/V stream per sequence, q8_0 keys), the same tokens are scored in several ways and every
position's row is compared with the row it gets when each token is fed alone (one row per call):

    calls of c rows     one sequence, c = 2..33 over its first 40 tokens, and one call of 64 rows
    4 sequences         the text in sequence 0 and three others, 5 rows of each per call (sequence 0's
                        last), the others' last rows removed after each call and fed again
                        (rejections: holes in a shared pool, which later rows of sequence 0 fill out
                        of position order)
    own rollback        one sequence, 5 rows a call, its last rows removed and fed again each time
    several rows: 3..33 vs 2   calls of 3..33 rows against calls of 2, not against one-row calls
    long: 1 vs 2 rows   the last 64 positions of a 600-token text (past 512 cells in view), one row
                        per call against two rows per call, after the same prefix (copied)

Printed per mode: positions compared, how many are bit-identical, the largest logit difference
and how many positions' argmax moved. Not a test: it measures (tests/models/test_llamacpp.py
checks specd's configuration on a tiny GGUF).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from arguments import positive  # noqa: E402
from heldout import refuse_outputs  # noqa: E402

from specd.files import write_text_atomic  # noqa: E402
from specd.models.llamacpp.lib import Context, GGUFModel, binding  # noqa: E402
from specd.models.run.embedded import EMBEDDED  # noqa: E402

FILES = {"smollm": "smollm2-135m", "gemma": "gemma-3-270m"}
# name -> Context keywords: llama.cpp's defaults (flash attention on, off), a shared pool with q8_0
# keys, and specd's configuration (a stream per sequence, q8_0 keys)
CONFIGS = {
    "pool / f16 keys / FA on": {"unified": True, "k_type": "f16", "flash_attn": True},
    "pool / f16 keys / FA off": {"unified": True, "k_type": "f16", "flash_attn": False},
    "pool / q8_0 keys / FA on": {"unified": True, "k_type": "q8_0", "flash_attn": True},
    "streams / q8_0 keys / FA on (specd)": {"unified": False, "k_type": "q8_0", "flash_attn": True},
}
TEXT = (
    "The Hollin family has grown apples on the same hillside since 1911. Their orchard covers 14 hectares "
    "and holds 22 varieties, from early Discovery apples picked in August to late Braeburns kept in cold "
    "storage until spring. Each October about forty seasonal workers help with the harvest, which averages "
    "310 tonnes. Fruit that is too small or marked goes to the press, and the farm's cider is sold in its "
    "own shop and in six local pubs. "
)
SHORT, TILE, LONG, TAIL = 40, 64, 600, 64


def tokens_of(model: GGUFModel, text: str, n: int) -> list[int]:
    """The first ``n`` tokens of ``text`` repeated, by llama.cpp's own tokenizer."""
    lib = binding()
    vocab = lib.llama_model_get_vocab(model.handle)
    data = (text * (1 + 4 * n // len(text))).encode()
    out = (lib.llama_token * (len(data) + 8))()
    count = lib.llama_tokenize(vocab, data, len(data), out, len(out), True, False)
    return list(out[: min(count, n)])


def score(ctx: Context, calls: list[list[tuple[int, int, int]]], keep_seq: int = 0) -> dict[int, torch.Tensor]:
    """Feed ``calls`` (each a list of (seq, token, position), every row asking for logits) -> the rows of
    ``keep_seq`` by position (a position fed twice keeps its last row)."""
    rows: dict[int, torch.Tensor] = {}
    for call in calls:
        out = ctx.decode(
            np.array([t for _, t, _ in call]),
            np.array([p for _, _, p in call]),
            [s for s, _, _ in call],
            np.ones(len(call), dtype=bool),
        )
        for (s, _, p), row in zip(call, out):
            if s == keep_seq:
                rows[p] = row
    return rows


def chunked(tokens: list[int], size: int, seq: int = 0, start: int = 0) -> list[list[tuple[int, int, int]]]:
    return [[(seq, t, start + i + j) for j, t in enumerate(tokens[i : i + size])] for i in range(0, len(tokens), size)]


def compare(reference: dict[int, torch.Tensor], rows: dict[int, torch.Tensor]) -> dict:
    same = moved = 0
    worst = 0.0
    for p, row in rows.items():
        ref = reference[p]
        same += bool(torch.equal(ref, row))
        worst = max(worst, float((ref - row).abs().max()))
        moved += int(ref.argmax()) != int(row.argmax())
    return {"positions": len(rows), "identical": same, "max_abs_diff": worst, "argmax_moved": moved}


def with_rejections(ctx: Context, text: list[int], others: list[list[int]], own: bool) -> dict[int, torch.Tensor]:
    """Sequence 0 holds ``text`` and takes 5 rows a call, last in the call. ``own``: it alone, its last
    rows removed after each call and fed again. Else beside three others, which take 5 rows and keep
    1 on even calls, 1 row on odd ones: the holes they leave lie before sequence 0's last rows, and
    its next rows fill them (out of position order, in a shared pool)."""
    seqs = [text] if own else [text, *others]
    done = [0] * len(seqs)  # rows committed per sequence
    rows: dict[int, torch.Tensor] = {}
    step = 0
    while done[0] < len(text):
        width = [5] + [5 if step % 2 == 0 else 1] * (len(seqs) - 1)
        call = []
        for s in [*range(1, len(seqs)), 0]:
            call += [(s, seqs[s][p], p) for p in range(done[s], min(done[s] + width[s], len(seqs[s])))]
        rows.update(score(ctx, [call]))
        for s, toks in enumerate(seqs):
            fed = min(done[s] + width[s], len(toks))
            if own:
                keep = max(done[s] + 1, fed - 1 - step % 3)
            else:
                keep = fed if s == 0 or width[s] == 1 else min(fed, done[s] + 1)
            if keep < fed:
                ctx.remove(s, keep, -1)
            done[s] = keep
        step += 1
    return rows


def measure(name: str, threads: int, configs) -> list[dict]:
    model = GGUFModel(EMBEDDED[FILES[name]].gguf())
    text = tokens_of(model, TEXT, LONG)
    short = text[:SHORT]
    others = [tokens_of(model, TEXT[k * 37 :] + TEXT, SHORT) for k in (1, 2, 3)]
    out = []
    for config in configs:
        keywords = CONFIGS[config]
        ctx = Context(model, cells=1024, streams=4, threads=threads, **keywords)
        reference = score(ctx, chunked(text[:TILE], 1))
        modes = {f"calls of {c}": chunked(short, c) for c in range(2, 34)} | {
            f"calls of {TILE}": chunked(text[:TILE], TILE)
        }
        rows, by_mode = [], {}
        for mode, calls in modes.items():
            ctx.clear()
            by_mode[mode] = score(ctx, calls)
            rows.append({"mode": mode, **compare(reference, by_mode[mode])})
        # do calls of several rows agree among themselves? (a kernel taken only for one-row calls would
        # part them all from the reference alike)
        among = [compare(by_mode["calls of 2"], by_mode[f"calls of {c}"]) for c in range(3, 34)]
        rows.append(
            {
                "mode": "several rows: 3..33 vs 2",
                **{k: sum(r[k] for r in among) for k in ("positions", "identical", "argmax_moved")},
                "max_abs_diff": max(r["max_abs_diff"] for r in among),
            }
        )
        ctx.clear()
        rows.append({"mode": "4 sequences", **compare(reference, with_rejections(ctx, short, others, False))})
        ctx.clear()
        rows.append({"mode": "own rollback", **compare(reference, with_rejections(ctx, short, others, True))})
        ctx.clear()
        score(ctx, chunked(text[: LONG - TAIL], 32))
        ctx.copy(0, 1)
        one = score(ctx, chunked(text[LONG - TAIL :], 1, start=LONG - TAIL))
        two = score(ctx, chunked(text[LONG - TAIL :], 2, seq=1, start=LONG - TAIL), keep_seq=1)
        rows.append({"mode": "long: 1 vs 2 rows", **compare(one, two)})
        ctx.close()
        out += [{**row, "model": name, "config": config} for row in rows]
        summary([r for r in out if r["config"] == config], header=not out[: -len(rows)])
    return out


def summary(rows: list[dict], header: bool = True) -> None:
    """One line per model, configuration and mode (calls of 2..33 rows together), as each is measured."""
    if header:
        print("| model | configuration | mode | identical positions | max abs diff | argmax moved |")
        print("|---|---|---|---|---|---|")
    for name in dict.fromkeys(r["model"] for r in rows):
        for config in CONFIGS:
            mine = [r for r in rows if r["model"] == name and r["config"] == config]
            if not mine:
                continue
            small = [r for r in mine if r["mode"].startswith("calls of ") and int(r["mode"].split()[-1]) <= 33]
            groups = [("calls of 2..33", small)] + [(r["mode"], [r]) for r in mine if r not in small]
            for mode, group in groups:
                n, same = sum(r["positions"] for r in group), sum(r["identical"] for r in group)
                diff, moved = max(r["max_abs_diff"] for r in group), sum(r["argmax_moved"] for r in group)
                print(f"| {name} | {config} | {mode} | {same}/{n} | {diff:.3g} | {moved} |", flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="smollm,gemma")
    ap.add_argument("--threads", type=positive, default=2)
    ap.add_argument("--configs", default="all", help=f"all, or some of: {'; '.join(CONFIGS)} (separated by ;)")
    ap.add_argument("--json", default=None, help="also write every mode's figures to this file")
    args = ap.parse_args()
    configs = list(CONFIGS) if args.configs == "all" else [c.strip() for c in args.configs.split(";")]
    unknown = [c for c in configs if c not in CONFIGS]
    if unknown:
        raise SystemExit(f"unknown configuration {unknown[0]!r}: choose from {'; '.join(CONFIGS)}")
    refuse_outputs("llamacpp_invariance.py", {"--json": args.json})  # before minutes of measuring
    rows = []
    for name in args.models.split(","):
        if name not in FILES:
            raise SystemExit(f"unknown model {name!r}: choose from {', '.join(FILES)}")
        rows += measure(name, args.threads, configs)
        if args.json:
            write_text_atomic(args.json, json.dumps(rows, indent=1) + "\n", "JSON file")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
