"""Which backend runs a run's GGUF models, what each cannot run, and loading a GGUF for llama.cpp.

Two backends. ``hf``: transformers; a GGUF file is dequantized to float32 and run as a Hugging Face
model (model folders and hub ids always run here). ``llama.cpp``: the GGUF file as it is, on the
CPU (specd.models.llamacpp.model); the target is then llama.cpp's computation on the file. ``--backend``
names the backend of a run's GGUF models (``--target-gguf``, ``--draft-gguf``, ``embedded:NAME``).
Without it, an embedded model runs on its ``cpu_backend`` (specd.models.run.embedded: llama.cpp where
it was measured exact and faster) on a CPU where llama-cpp-python is installed and the run asks for
nothing only Hugging Face runs (a ``self:`` draft, a dtype, a device map, a token tree); everything
else runs on hf.
"""

from __future__ import annotations

from pathlib import Path

import torch

from specd.errors import ModelLoadError, UsageError, one_line
from specd.models.admission import EventSpace, admit
from specd.models.hf.loading import Loaded, load, one_gguf_parse, quiet_loading
from specd.models.hf.model import HFCausalLM, logit_width
from specd.models.llamacpp.lib import GGUFModel, available
from specd.models.llamacpp.model import LLAMA_CPP_CHAINS, LlamaCppLM
from specd.models.run.drafts import parse_drafts
from specd.models.run.embedded import EMBEDDED, cache_root, exclusive, make_folder

HF, LLAMA_CPP = "hf", "llama.cpp"
BACKENDS = (HF, LLAMA_CPP)


def hf_only(opts) -> str | None:
    """What in ``opts`` only the hf backend runs, in words (None: nothing)."""
    built = [s.text for s in parse_drafts(opts.draft) if s.kind.startswith("self-")]
    if built:
        shared = next((s for s in built if s.startswith("self:vocab=")), None)
        if shared:
            return (
                f"--draft {shared}: a shared-body draft applies a head of its own to the target's hidden states; "
                "llama.cpp gives those at every row, but runs its head only inside its own graph, so that head "
                "would be another function than the target's logits"
            )
        return f"--draft {built[0]}: a self: draft is built from the target's weights as a Hugging Face model"
    if opts.dtype != "auto":
        return f"--dtype {opts.dtype}: llama.cpp runs the GGUF file's own types"
    if opts.device_map is not None:
        return "--device-map: accelerate spreads Hugging Face models only"
    if opts.device not in ("auto", "cpu"):
        return f"--device {opts.device}: specd runs llama.cpp on the CPU"
    if getattr(opts, "tree", None) not in (None, "none"):
        return f"--tree {opts.tree}: {LLAMA_CPP_CHAINS}"
    if opts.target is not None and not opts.embedded:
        return "--target names a model folder or hub id; llama.cpp runs GGUF files (--target-gguf, embedded:NAME)"
    return None


def check(opts) -> None:
    """Refuse ``--backend llama.cpp`` with what it cannot run, in one line (before anything loads)."""
    if opts.backend == LLAMA_CPP and (why := hf_only(opts)):
        raise UsageError(f"--backend llama.cpp: {why}; use --backend hf")


def choose(opts, device: torch.device, given_target: bool = False) -> str:
    """The backend of a run: ``--backend`` if given; an embedded target on a CPU: its ``cpu_backend``
    when llama-cpp-python is installed and the run asks for nothing only hf runs; else hf.
    ``given_target``: the target is a Hugging Face model object the caller holds (hf)."""
    if given_target:
        if opts.backend == LLAMA_CPP:
            raise UsageError("backend='llama.cpp' runs GGUF files; a target given as a model object runs on hf")
        return HF
    if opts.backend is not None:
        return opts.backend
    embedded = EMBEDDED.get(opts.embedded) if opts.embedded else None
    if embedded and device.type == "cpu" and embedded.cpu_backend == LLAMA_CPP and hf_only(opts) is None:
        return LLAMA_CPP if available() else HF
    return HF


def load_gguf(path: str | Path, name: str, cache_key: str | None = None) -> Loaded:
    """A GGUF file for llama.cpp and its tokenizer (transformers' reading of the same file). An
    embedded model's tokenizer (``cache_key``) is saved once in specd's cache: read from the GGUF it
    takes seconds (Gemma 3's 262,144 tokens), from the saved copy a fraction of that."""
    model = GGUFModel(path)
    tokenizer = _cached_tokenizer(Path(path), cache_key) if cache_key else _gguf_tokenizer(Path(path))
    model.generation_config = _generation_config(tokenizer)
    return Loaded(model, tokenizer, str(path), "gguf")


def _gguf_tokenizer(path: Path):
    from transformers import AutoTokenizer

    quiet_loading()
    try:
        with one_gguf_parse():
            return AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    except Exception as err:  # noqa: BLE001 - every failure becomes one line
        raise ModelLoadError(
            f"cannot read the tokenizer of {path}: {one_line(str(err)) or type(err).__name__}"
        ) from None


def _cached_tokenizer(path: Path, key: str):
    """The tokenizer of an embedded GGUF from specd's cache, saved there on first use (to a folder
    beside it, renamed into place whole)."""
    import os
    import shutil

    import transformers
    from transformers import AutoTokenizer

    folder = cache_root() / key / f"tokenizer-transformers-{transformers.__version__}"
    if (folder / "tokenizer_config.json").is_file():
        return AutoTokenizer.from_pretrained(str(folder))
    tokenizer = _gguf_tokenizer(path)
    make_folder(folder.parent, "specd's cache")
    with exclusive(folder.parent / ".tokenizer.lock"):
        if not folder.exists():
            tmp = folder.with_name(f"{folder.name}.tmp-{os.getpid()}")
            try:
                tokenizer.save_pretrained(str(tmp))
                os.replace(tmp, folder)
            except OSError:  # a cache that cannot be written costs the next run the same seconds, no more
                pass
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
    return tokenizer


def _generation_config(tokenizer):
    """The generation config transformers builds for a GGUF file (its token ids; no sampling values)."""
    from transformers import GenerationConfig

    ids = {f"{k}_token_id": getattr(tokenizer, f"{k}_token_id", None) for k in ("bos", "eos", "pad")}
    return GenerationConfig(**{k: v for k, v in ids.items() if v is not None})


def load_models(opts, specs, dtype, device, given, tokenizer, backend: str, cache_key: str | None, placement) -> tuple:
    """(target, draft model or None) as ``Loaded``: on ``backend`` (a GGUF file on llama.cpp: its
    ``GGUFModel``; a folder or hub id always on Hugging Face, placed by ``placement``, ``load``'s
    keywords), or taken from ``given`` (objects the caller holds). ``cache_key``: an embedded
    target's, where its tokenizer is kept."""
    on_llama = backend == LLAMA_CPP
    if "target" in given:
        target = given["target"]
    elif on_llama:
        target = load_gguf(opts.target_gguf, opts.target_gguf, cache_key)
    else:
        target = load(opts.target, opts.target_gguf, dtype, device, tokenizer=tokenizer, **placement)
    model_spec = next((spec for spec in specs if spec.needs_model), None)
    if model_spec is None:
        return target, None
    if "draft" in given:
        return target, given["draft"]
    if on_llama and opts.draft_gguf:
        return target, load_gguf(opts.draft_gguf, opts.draft_gguf)
    return target, load(model_spec.value, opts.draft_gguf, dtype, device, **placement)


def adapters(target: Loaded, draft: Loaded | None, graphs: str = "off") -> tuple:
    """The loaded target (and draft model) as specd's causal LMs, each on its backend, over one
    admitted event space -> (target LM, draft LM or None, EventSpace). ``graphs``: --graphs, for the
    Hugging Face models (specd.models.hf.graphs)."""
    tok = target.tokenizer
    t_width = width(target.model)
    d_width = width(draft.model) if draft else t_width
    space: EventSpace = admit(tok, draft.tokenizer if draft else None, t_width, d_width)
    pad = tok.pad_token_id if tok.pad_token_id is not None else (tok.eos_token_id or 0)

    def lm(loaded: Loaded):
        if isinstance(loaded.model, GGUFModel):
            return LlamaCppLM(loaded.model, loaded.name, width=space.width)
        return HFCausalLM(loaded.model, loaded.name, width=space.width, pad_id=pad, graphs=graphs)

    return lm(target), lm(draft) if draft else None, space


def width(model) -> int:
    """A loaded model's logit row width."""
    return model.facts.vocab if isinstance(model, GGUFModel) else logit_width(model)


def describe(lm) -> str:
    """What ran a run's target, in words (the output says it)."""
    if isinstance(lm, LlamaCppLM):
        facts = lm.file.facts
        return f"llama.cpp ({facts.description} GGUF as stored, {lm.k_type} keys, {lm.threads} threads, CPU)"
    return f"hf (transformers, {str(lm.dtype).removeprefix('torch.')} on {lm.device})"
