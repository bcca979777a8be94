"""A run's manifest: everything that determines its output (models and their weights' digests,
both sampling policies, seed, K, the tree and its budget, stops, dtype, device and library versions),
as the trace header and ``--json`` record it."""

from __future__ import annotations

import hashlib
import json

import torch

from specd.core.proposer import ModelProposer
from specd.core.tree_shape import parse_tree
from specd.models.hf.loading import weights_digest
from specd.models.hf.model import HFCausalLM
from specd.models.llamacpp.model import LlamaCppLM, file_digest
from specd.models.run.option_checks import AUTO_TREE
from specd.models.run.pipeline import Pipeline


def run_manifest(pipe: Pipeline, baseline: bool = False, k: int | None = None) -> dict:
    """The manifest of a run of ``pipe`` (target-only with ``baseline``; ``k``: the run's K, default
    the options')."""
    import transformers

    def draft_entry(source) -> dict | None:
        if not getattr(source, "shares_target_cache", False):
            return model_entry(pipe, getattr(source, "model", source))
        columns = source.columns.tolist()
        vocabulary = {"tokens": len(columns), "sha256": hashlib.sha256(json.dumps(columns).encode()).hexdigest()}
        name = f"self:vocab={len(columns)}({pipe.target.name})"  # the target's body, a restricted head
        return {
            **(model_entry(pipe, pipe.target) or {}),
            "name": name,
            "identity": source.identity,
            "draft_vocabulary": vocabulary,
        }

    o = pipe.options
    return {
        "target": model_entry(pipe, pipe.target),
        "draft": None if baseline else draft_entry(draft_source(pipe)),
        "draft_sources": None if baseline else list(pipe.proposer.identities),
        "dtype": str(pipe.target.dtype).removeprefix("torch."),  # as loaded (--dtype auto resolved)
        "device": str(pipe.device),
        # on CUDA, whether steps may be captured (a call padded to its bucket can round apart from an eager one)
        **({"graphs": o.graphs} if pipe.device.type == "cuda" else {}),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "target_policy": pipe.target_policy.describe(),
        "draft_policy": None if baseline else pipe.draft_policy.describe(),
        "sampling": pipe.sampling_doc(baseline),
        "layout": o.layout,
        "backend": pipe.backend,
        "softmax": o.softmax,
        **k_fields(pipe, o.k if k is None else k, baseline),
        "seed": o.seed,
        "rule": o.rule,
        "max_new_tokens": o.max_new_tokens,
        "stop": list(o.stop),
        "chat": bool(o.chat),
        "event_space": {"real_vocab": pipe.space.real_vocab, "logit_width": pipe.space.width},
        "eos_ids": sorted(pipe.eos_ids),
    }


def model_entry(pipe: Pipeline, lm) -> dict | None:
    """A model as the manifest names it: its name, identity, weights' digest (kept per pipeline) and size."""
    if lm is None:
        return None
    if isinstance(lm, LlamaCppLM):  # the file's bytes are its weights
        return {
            "name": lm.name,
            "identity": lm.identity,
            "weights_sha256": file_digest(lm.file),
            "parameters": lm.file.facts.parameters,
        }
    if not isinstance(lm, HFCausalLM):
        return {"name": lm.identity, "identity": lm.identity, "weights_sha256": None, "parameters": 0}
    if lm.name not in pipe.digests:
        pipe.digests[lm.name] = weights_digest(lm.model)
    return {
        "name": lm.name,
        "identity": lm.identity,
        "weights_sha256": pipe.digests[lm.name],
        "parameters": sum(p.numel() for p in lm.model.parameters()),
    }


def k_fields(pipe: Pipeline, k, baseline: bool) -> dict:
    """What decides a speculative run's drafts: K, the tree and its budget, K's bound (where -k auto
    chooses K: a fixed tree's depth is its K), --draft-stop and the K schedules replayed (target-only:
    K = 0, none of the others)."""
    o = pipe.options
    if baseline:
        return {"k": 0, "tree": None, "tree_budget": None, "k_max": None, "draft_stop": None, "k_schedule": None}
    chosen = k == "auto" and o.tree in (None, AUTO_TREE)
    return {
        "k": k,
        "tree": tree_record(o.tree),
        "tree_budget": o.auto_tree_budget or None,
        "k_max": o.k_max if chosen else None,
        "draft_stop": o.draft_stop,
        "k_schedule": schedule_record(o.k_schedule, pipe.k_schedules),
    }


def schedule_record(path: str | None, schedules: dict | None) -> dict | None:
    """The K schedules a run replays (--k-schedule), as its output depends on them: the digest of every
    request's schedule (whatever file, or spelling of its path, gave them), and the file, for the reader."""
    if path is None or schedules is None:
        return None
    text = json.dumps(sorted((rid, [list(r) for r in rounds]) for rid, rounds in schedules.items()))
    return {"file": path, "sha256": hashlib.sha256(text.encode()).hexdigest()}


def tree_record(spec: str | None) -> dict | None:
    """The tree a run drafts, as its output depends on it: a static shape's rank paths (whatever file or
    spelling gave them) and the construction asked for, a dynamic one's bounds, or ``auto`` (its node
    budget is the manifest's ``tree_budget``); ``spec`` as given, for the reader. None: chains."""
    if spec is None:
        return None
    if spec == AUTO_TREE:
        return {"spec": spec, "auto": True}
    shape = parse_tree(spec)
    if shape.choices is None:
        return {
            "spec": spec,
            "drawn": shape.drawn,
            "nodes": shape.nodes,
            "depth": shape.max_depth,
            "width": shape.width,
        }
    return {"spec": spec, "drawn": shape.drawn, "choices": [list(c) for c in shape.choices]}


def draft_source(pipe: Pipeline):
    """The model source among the draft sources (or the first source, when all are lookups)."""
    models = [s for s in pipe.proposer.sources if isinstance(s, ModelProposer)]
    return models[0] if models else pipe.proposer.sources[0]
