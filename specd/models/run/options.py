"""The options of a generation run: each declared once, typed once and validated once.

Every option is one field of ``GenerateOptions`` declared with ``option(...)``: its
name, default, flags, kind (the type a value must have), help and range check. From
that one declaration come the command-line parameters of ``generate``, ``trace run``
and ``sweep-k --measure`` (``specd.cli.options`` builds their Typer signatures), the
checking of YAML config values, and the names used in messages. Every value is
checked when the object is built, for type and range, with a message naming where
it came from (the flag, or the config file and key); nothing downstream re-validates.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from specd.core.controls import (
    check_additive_penalty,
    check_count,
    check_min_p,
    check_penalty,
    check_temperature,
    check_top_k,
    check_top_p,
)
from specd.core.layouts import LAYOUTS
from specd.core.probability import BACKENDS
from specd.core.proposer import check_draft_stop
from specd.core.rules import RULES
from specd.core.tree_shape import parse_tree
from specd.errors import UsageError
from specd.models.hf.graphs import MODES as GRAPH_MODES
from specd.models.numbers import parse_max_memory
from specd.models.run.backends import BACKENDS as MODEL_BACKENDS
from specd.models.run.backends import check as check_backend_options
from specd.models.run.drafts import parse_drafts
from specd.models.run.embedded import embedded_name
from specd.models.run.generation_config import check_mode
from specd.models.run.option_checks import (
    AUTO_TREE,
    device_map_value,
    draft_value,
    path_value,
    sampling,
    stop_strings,
    tree_value,
)
from specd.models.run.option_spec import at_least_one, one_of, option, specs, typed
from specd.policy.kpolicy import DEFAULT_K_MAX, DEFAULT_TREE_BUDGET, MAX_K, check_k, check_k_max, check_tree_budget

BATCH_SIZE_CPU = 64  # requests decoding together on a CPU when the user does not say
BATCH_SIZE_CUDA_MAX = 256  # on CUDA: as many as half the free memory holds (batch_for_memory), at most this
DTYPE_NAMES = ("auto", "float32", "bfloat16", "float16")

DEFAULT_RULE = "invariant"


def batch_for_memory(free_bytes: int, per_request_bytes: int, cap: int = BATCH_SIZE_CUDA_MAX) -> int:
    """The requests that fit half of ``free_bytes`` (the other half for activations and the
    allocator's slack) at ``per_request_bytes`` each: at least 1, at most ``cap``."""
    return max(1, min(cap, free_bytes // 2 // max(per_request_bytes, 1)))


@dataclass(frozen=True)
class GenerateOptions:
    # -- models
    target: str | None = option(
        None,
        "--target",
        kind="str?",
        help="Target: local folder or hub id (offline cache). Default: embedded SmolLM2-135M-Instruct.",
        check=path_value,
    )
    draft: str | None = option(
        None,
        "--draft",
        kind="str?",
        help="Draft sources, one or a comma-separated list (each round, each request drafts from one): "
        "folder/hub id, self:bf16, self:fp16, self:layers=N, self:vocab=N, ngram:N, suffix. Default: "
        "suffix,self:bf16 for the embedded SmolLM2, suffix,self:vocab=16384 for embedded Gemma 3, suffix for your "
        "own target.",
        check=draft_value,
    )
    draft_vocab: str | None = option(
        None,
        "--draft-vocab",
        kind="str?",
        help="The frequency table self:vocab=N takes its N tokens from (a specd.vocab-frequency/v1 file). Default: "
        "the embedded model's shipped table, else one built from your target on first use and cached.",
    )
    target_gguf: str | None = option(
        None, "--target-gguf", kind="str?", help="Target from a GGUF file.", check=path_value
    )
    draft_gguf: str | None = option(None, "--draft-gguf", kind="str?", help="Draft from a GGUF file.", check=path_value)
    backend: str | None = option(
        None,
        "--backend",
        kind="str?",
        help="What runs the GGUF models (--target-gguf, --draft-gguf, embedded:NAME): llama.cpp (the file as it "
        "is, on the CPU) or hf (dequantized to float32, transformers; folders and hub ids always run on it). "
        "Default: llama.cpp for an embedded model on a CPU when llama-cpp-python is installed, else hf.",
        check=lambda value, where: value is None or one_of("backend", MODEL_BACKENDS)(value, where),
    )
    trust_remote_code: bool = option(
        False,
        "--trust-remote-code",
        kind="bool",
        help="Run Python code shipped inside a model folder (its config's auto_map). Off by default: that code "
        "runs with your permissions, so pass this only for models from a source you trust.",
    )
    # -- decoding
    k: int | str = option(
        "auto",
        "-k",
        "--k",
        kind="k",
        help="Drafts per round: auto (chosen per request and round from its acceptance and the measured "
        f"costs; K = 0 when drafting does not pay) or a fixed K in 1..{MAX_K}.",
        check=check_k,
    )
    tree: str | None = option(
        None,
        "--tree",
        kind="str?",
        metavar="SPEC",
        help="Draft a token tree each round, verified in one target call: branching per depth (3,2,1,1), EAGLE "
        "choices (JSON like [[0],[1],[0,0]], or a file of it) or nodes=N (the draft's N likeliest paths); a prefix "
        "sampled:, rank: or iid: says how siblings are drawn; its depth is the round's K. auto: -k auto chooses the "
        "shape per request and round, a chain or a tree of at most --tree-budget nodes, whichever pays here.",
        check=tree_value,
    )
    tree_budget: int | None = option(
        None,
        "--tree-budget",
        kind="int?",
        help=f"With --tree auto: the most nodes a tree may have, 2..256 (default {DEFAULT_TREE_BUDGET}).",
        check=lambda value, where: value is None or check_tree_budget(value, where),
    )
    k_max: int = option(
        DEFAULT_K_MAX,
        "--k-max",
        kind="int",
        help=f"The largest K that -k auto may choose, 1..{MAX_K}.",
        check=check_k_max,
    )
    draft_stop: float = option(
        0.0,
        "--draft-stop",
        kind="float",
        help="Stop drafting where the draft's largest probability at the next position is below P, in [0, 1) "
        "(0: never).",
        check=check_draft_stop,
    )
    k_schedule: str | None = option(
        None,
        "--k-schedule",
        kind="str?",
        help="Replay the K schedules recorded in FILE (a --json document, a results file or an acceptance "
        "log), reproducing a sampled -k auto run token for token.",
    )
    max_new_tokens: int = option(
        128, "--max-new-tokens", kind="int", help="Token budget per prompt (>= 1).", check=at_least_one
    )
    temperature: float | None = option(
        None,
        "--temperature",
        kind="float?",
        help="Target temperature (finite, >= 0; 0 = greedy). Default: the model's generation config "
        "(--generation-config auto), else greedy.",
        check=sampling(check_temperature),
    )
    generation_config: str = option(
        "auto",
        "--generation-config",
        kind="str",
        help="auto: sampling values you do not give come from the target's generation_config.json as Hugging "
        "Face's generate() resolves them (top_k 50 when sampling); none: ignore the file (greedy unless asked).",
        check=check_mode,
    )
    top_k: int | None = option(
        None,
        "--top-k",
        kind="int?",
        help="Target top-k (>= 1; 0 = off, as in Hugging Face).",
        check=sampling(check_top_k),
    )
    top_p: float | None = option(
        None, "--top-p", kind="float?", help="Target top-p in (0, 1].", check=sampling(check_top_p)
    )
    repetition_penalty: float | None = option(
        None,
        "--repetition-penalty",
        kind="float?",
        help="Target repetition penalty (finite, > 0).",
        check=sampling(check_penalty),
    )
    min_p: float | None = option(
        None,
        "--min-p",
        kind="float?",
        help="Drop tokens below min-p times the most likely one's probability, when sampling (in [0, 1]; "
        "Hugging Face's min_p, after top-k and top-p).",
        check=sampling(check_min_p),
    )
    presence_penalty: float | None = option(
        None,
        "--presence-penalty",
        kind="float?",
        help="Subtract this from the logit of every token already in the output (vLLM/OpenAI; in [-2, 2], "
        "negative favours repeats).",
        check=sampling(check_additive_penalty),
    )
    frequency_penalty: float | None = option(
        None,
        "--frequency-penalty",
        kind="float?",
        help="Subtract this times its count in the output from a token's logit (vLLM/OpenAI; in [-2, 2], "
        "negative favours repeats).",
        check=sampling(check_additive_penalty),
    )
    no_repeat_ngram_size: int | None = option(
        None,
        "--no-repeat-ngram-size",
        kind="int?",
        help="Never repeat an n-gram of this size from prompt and output (Hugging Face's; >= 0, 0 = off).",
        check=sampling(check_count),
    )
    bad_words: tuple[str, ...] = option(
        (),
        "--bad-words",
        kind="strs",
        help="A string never to generate (repeatable): banned as the tokenizer encodes it, with and without "
        "a leading space (Hugging Face's bad_words_ids).",
    )
    min_new_tokens: int | None = option(
        None,
        "--min-new-tokens",
        kind="int?",
        help="End-of-sequence is suppressed until this many tokens are generated (Hugging Face's; >= 0).",
        check=sampling(check_count),
    )
    draft_temperature: float | None = option(
        None,
        "--draft-temperature",
        kind="float?",
        help="Draft temperature (default: the target's).",
        check=sampling(check_temperature),
    )
    draft_top_k: int | None = option(
        None, "--draft-top-k", kind="int?", help="Draft top-k (default: the target's).", check=sampling(check_top_k)
    )
    draft_top_p: float | None = option(
        None, "--draft-top-p", kind="float?", help="Draft top-p (default: the target's).", check=sampling(check_top_p)
    )
    seed: int = option(0, "--seed", kind="int", help="Seed of every request's random streams.")
    rule: str = option(
        DEFAULT_RULE,
        "--rule",
        kind="str",
        help="How sampled drafts are verified. invariant: draft and target share Gumbel noise per output "
        "position and a draft is kept iff it is the target's own token, so the seed alone decides the text "
        "(the same with any K, draft, batch size or machine); maximal: accept with probability min(1, p/q) "
        "and correct from (p - q)+ (more drafts accepted, but the text depends on the K schedule); block: "
        "the drafts judged as a block (Sun et al. 2025), at least maximal's acceptance in expectation. All "
        "sample exactly the target's distribution; greedy decoding is the same under each.",
        check=one_of("rule", RULES),
    )
    layout: str = option(
        "replay_frontier",
        "--layout",
        kind="str",
        help="replay_frontier or retained_frontier.",
        check=one_of("layout", tuple(LAYOUTS)),
    )
    softmax: str = option(
        "max_shift",
        "--softmax",
        kind="str",
        help="How p and q are computed from logits: max_shift or online (the same distribution).",
        check=one_of("softmax", BACKENDS),
    )
    device: str = option("auto", "--device", kind="str", help="auto (cuda when present), cpu, cuda, cuda:N.")
    graphs: str = option(
        "auto",
        "--graphs",
        kind="str",
        help="Capture the models' steps as CUDA graphs (one per bucket of batch and rows, calls padded up to "
        "it): auto where the models run on CUDA and allow it (a model that does not is said once and runs "
        "eagerly), on (refused where it cannot), off.",
        check=one_of("graphs", GRAPH_MODES),
    )
    device_map: str | None = option(
        None,
        "--device-map",
        kind="str?",
        help="auto: spread target and draft over the GPUs, then CPU, then disk (accelerate's big-model "
        "inference), for models bigger than one device.",
        check=device_map_value,
    )
    max_memory: str | None = option(
        None,
        "--max-memory",
        kind="str?",
        help="With --device-map auto: the most each device may hold, e.g. 0=70GiB,cpu=100GiB.",
        check=lambda value, where: value is None or parse_max_memory(value, where),
    )
    dtype: str = option(
        "auto",
        "--dtype",
        kind="str",
        help="auto (float32 on a CPU; on CUDA the checkpoint's own dtype, float32 for a GGUF), float32, bfloat16 "
        "or float16. Decoding is exact with respect to the target as loaded in it (the manifest's dtype).",
        check=one_of("dtype", DTYPE_NAMES),
    )
    chat: bool | None = option(
        None,
        "--chat/--no-chat",
        kind="bool?",
        help="Wrap prompts in the chat template (default: on for the embedded model).",
    )
    stop: tuple[str, ...] = option((), "--stop", kind="strs", help="Stop string (repeatable).", check=stop_strings)
    # Where each value came from, for messages: field -> "flag" | "<config path>" (absent: default).
    sources: Mapping[str, str] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        for name, (spec, _) in specs(GenerateOptions).items():
            value = typed(spec.kind, getattr(self, name), self.where(name))
            object.__setattr__(self, name, value)
            if spec.check is not None:
                spec.check(value, self.where(name))
        embedded_name(self.target, self.target_gguf)  # an unknown embedded:NAME: refused before anything loads
        check_backend_options(self)  # what --backend llama.cpp cannot run: refused before anything loads
        for model, gguf in (("target", "target_gguf"), ("draft", "draft_gguf")):
            if getattr(self, model) and getattr(self, gguf):
                raise UsageError(f"give {self.flag(model)} or {self.flag(gguf)}, not both")
        if self.draft_gguf and not (self.target or self.target_gguf):
            raise UsageError("--draft-gguf needs a --target or --target-gguf (the embedded default has its own draft)")
        if self.min_new_tokens is not None and self.min_new_tokens > self.max_new_tokens:
            raise UsageError(
                f"{self.where('min_new_tokens')} {self.min_new_tokens} is above {self.where('max_new_tokens')} "
                f"{self.max_new_tokens}: no run could honour both"
            )
        if self.max_memory is not None and self.device_map is None:
            raise UsageError("--max-memory needs --device-map auto")
        built = [s for s in parse_drafts(self.draft) if s.kind in ("self-dtype", "self-layers", "self-vocab")]
        if self.device_map and built:
            raise UsageError(
                f"--draft {built[0].text} is built from the target, which --device-map spreads over devices "
                "(accelerate's hooks own its forward); give a separate draft model, ngram:N or suffix"
            )
        if sum(1 for s in parse_drafts(self.draft) if s.needs_model) + bool(self.draft_gguf) > 1:
            raise UsageError(f"--draft {self.draft}: at most one separate draft model per run")
        shared = [s for s in parse_drafts(self.draft) if s.kind == "self-vocab"]
        if shared and self.layout != "replay_frontier":
            raise UsageError(
                f"--draft {shared[0].text} drafts the frontier into the target's cache, which {self.where('layout')} "
                f"{self.layout} already holds: use --layout replay_frontier"
            )
        if self.tree is not None:
            self._check_tree(shared)
        if self.tree_budget is not None and self.tree != AUTO_TREE:
            raise UsageError(f"{self.where('tree_budget')} bounds the trees of --tree auto; give --tree auto with it")
        if self.draft_vocab is not None and not shared and self.draft is not None:
            raise UsageError(
                f"{self.where('draft_vocab')} is the table of a self:vocab=N draft; --draft {self.draft} has none"
            )

    def _check_tree(self, shared) -> None:
        """--tree with what cannot serve a tree, refused by name (the engine refuses the same)."""
        auto = self.tree == AUTO_TREE
        if self.k != "auto":
            what = "lets -k auto choose each round's shape" if auto else "sets each round's depth (its K)"
            raise UsageError(f"{self.where('tree')} {what}; {self.where('k')} {self.k} does not apply")
        if auto and self.k_schedule is not None:
            raise UsageError(f"{self.where('tree')} auto chooses shapes; a --k-schedule replays K, not shapes")
        if self.rule == "block" and (auto or not parse_tree(self.tree).is_chain):
            raise UsageError(
                f"{self.where('tree')}: block verification judges a chain as a block and has no tree form here; "
                "use --rule maximal or invariant with a tree"
            )
        if shared:
            raise UsageError(
                f"{self.where('tree')}: --draft {shared[0].text} drafts chains only (into the target's cache)"
            )

    @staticmethod
    def flag(name: str) -> str:
        return specs(GenerateOptions)[name][0].flag

    def given(self, name: str) -> tuple[object, str] | None:
        """(value, where it came from) when the user set ``name`` (a flag or the config file), else None."""
        value = getattr(self, name)
        return None if value is None else (value, self.sources.get(name, "flag"))

    def where(self, name: str) -> str:
        """How to name a field in a message: its flag, or the config file and key it came from."""
        source = self.sources.get(name, "flag")
        return self.flag(name) if source == "flag" else f"{source}: {name}"

    @property
    def auto_k(self) -> bool:
        return self.k == "auto"

    @property
    def auto_tree_budget(self) -> int:  # the node budget of -k auto's trees (0: no --tree auto, chains only)
        return (self.tree_budget or DEFAULT_TREE_BUDGET) if self.tree == AUTO_TREE else 0

    @property
    def embedded(self) -> str | None:
        """The embedded model the target names (none given: the default), else None."""
        return embedded_name(self.target, self.target_gguf)

    @property
    def uses_default_model(self) -> bool:
        """An embedded model (specd.models.run.embedded), not a folder, hub id or GGUF of the user's."""
        return self.embedded is not None


OPTION_FIELDS = frozenset(specs(GenerateOptions))


def from_sources(flags: Mapping, config: Mapping, config_path: str | None, typed_on_command_line: set[str]):
    """Options from the command line's flags and a config file's keys: a flag typed on the
    command line wins over the file, the file over the defaults."""
    values, sources = {}, {}
    for name in OPTION_FIELDS:
        if name in typed_on_command_line or name not in config:
            if name in flags:
                values[name] = flags[name]
                sources[name] = "flag"
        else:
            values[name] = config[name]
            sources[name] = config_path or "config"
    if values.get("stop") is None:
        values["stop"] = ()
    return GenerateOptions(**values, sources=sources)
