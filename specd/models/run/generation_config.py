"""Sampling defaults from the model's ``generation_config.json``, resolved as Hugging Face's
``generate()`` resolves them.

With ``--generation-config auto`` (the default, as vLLM's), every sampling value the
user did not give (by flag or in the YAML config) comes from the target's
``generation_config.json`` exactly as ``generate()`` would take it when called with no
sampling arguments: ``do_sample`` (default false); when sampling, ``temperature``
(default 1.0), ``top_k`` (default 50, Hugging Face's own) and ``top_p`` (default 1.0,
off); ``repetition_penalty`` (default 1.0, off) for greedy and sampling alike. A value
the user gives wins: ``--temperature T`` with T > 0 means sampling (do_sample true), 0
means greedy; ``--top-k 0`` turns top-k off (as in Hugging Face). With ``none`` the
file is not read: greedy unless asked, no top-k, no top-p. The draft's values default
to the target's effective ones. Every effective value carries its source.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from specd.errors import UsageError, shown
from specd.files import MAX_CONFIG_BYTES, loads_json, read_text

MODES = ("auto", "none")
FILE_NAME = "generation_config.json"
# What generate() uses for a value neither the call nor the model's file sets (transformers 5).
HF_DEFAULTS = {"do_sample": False, "temperature": 1.0, "top_k": 50, "top_p": 1.0, "repetition_penalty": 1.0}
HF_DEFAULT = "Hugging Face default"
SPECD_DEFAULT = "specd default"


# Keys of a generation config that generate() applies and specd does not implement, each with
# the values at which generate() skips it (None, an empty list or mapping, too) and whether it
# acts only when sampling. Such a key is refused by name rather than silently dropped, because
# the output would then not have generate()'s distribution.
UNAPPLIED = {
    "typical_p": ((1.0,), True),
    "epsilon_cutoff": ((0.0,), True),
    "eta_cutoff": ((0.0,), True),
    "min_p": ((0.0,), True),
    "top_h": ((), True),
    "no_repeat_ngram_size": ((0,), False),
    "bad_words_ids": ((), False),
    "force_words_ids": ((), False),
    "suppress_tokens": ((), False),
    "begin_suppress_tokens": ((), False),
    "sequence_bias": ((), False),
    "min_length": ((0,), False),
    "min_new_tokens": ((0,), False),
    "forced_eos_token_id": ((), False),
    "exponential_decay_length_penalty": ((), False),
    "guidance_scale": ((1.0,), False),
    "num_beams": ((1,), False),
    "num_beam_groups": ((1,), False),
    "diversity_penalty": ((0.0,), False),
    "penalty_alpha": ((0.0,), False),
    "dola_layers": ((), False),
    "watermarking_config": ((), False),
}


def unapplied(values: Mapping) -> dict:
    """The keys of ``values`` that generate() would apply and specd cannot (see UNAPPLIED)."""
    out = {}
    for key, (neutral, _) in UNAPPLIED.items():
        value = values.get(key)
        if value is None or value in ({}, [], ()) or (not isinstance(value, (list, dict)) and value in neutral):
            continue
        out[key] = value
    return out


@dataclass(frozen=True)
class GenerationDefaults:
    """The sampling values a model's generation config sets (only those it sets), and where from;
    ``unapplied``: the keys it sets that specd does not implement (refused when they would act)."""

    mode: str  # auto | none
    values: Mapping[str, object] = field(default_factory=dict)
    where: str = FILE_NAME
    unapplied: Mapping[str, object] = field(default_factory=dict)

    def describe(self) -> dict:
        return {"mode": self.mode, "file": self.where, "values": dict(self.values)}


def check_mode(mode: str, where: str = "--generation-config") -> str:
    if mode not in MODES:
        raise UsageError(f"{where} takes auto or none, got {shown(mode)}")
    return mode


def _checked(values: dict, where: str) -> dict:
    """Only the sampling keys, each of the type and range generate() accepts, or one line naming it."""
    out = {}
    for key in HF_DEFAULTS:
        value = values.get(key)
        if value is None:
            continue
        number = isinstance(value, (int, float)) and not isinstance(value, bool)
        ok = {
            "do_sample": isinstance(value, bool),
            "temperature": number and math.isfinite(value) and value >= 0,
            "top_k": isinstance(value, int) and not isinstance(value, bool) and value >= 0,
            "top_p": number and 0 < value <= 1,
            "repetition_penalty": number and math.isfinite(value) and value > 0,
        }[key]
        if not ok:
            raise UsageError(f"{where}: {key} = {shown(value)} is not a valid value for {key}")
        out[key] = value
    return out


def read_folder(mode: str, folder: str | Path) -> GenerationDefaults | None:
    """From a local model folder's file (read strictly, before the model loads). None: not a folder."""
    if mode == "none":
        return GenerationDefaults("none", {}, "not read (--generation-config none)")
    path = Path(folder) / FILE_NAME
    if not Path(folder).is_dir():
        return None
    if not path.exists():
        return GenerationDefaults("auto", {}, f"{path} (absent)")
    text = read_text(path, "generation config", limit=MAX_CONFIG_BYTES)
    data = loads_json(text, str(path), what="not JSON; fix it or use --generation-config none")
    if not isinstance(data, dict):
        raise UsageError(f"{path}: a generation config must be a JSON object; use --generation-config none to skip it")
    return GenerationDefaults("auto", _checked(data, str(path)), str(path), unapplied(data))


def from_model(mode: str, model, name: str) -> GenerationDefaults:
    """From a loaded model's generation_config (a hub id in the local cache, a GGUF file)."""
    if mode == "none":
        return GenerationDefaults("none", {}, "not read (--generation-config none)")
    config = getattr(model, "generation_config", None)
    values = config.to_dict() if config is not None else {}
    where = f"{name}: generation_config"
    return GenerationDefaults("auto", _checked(values, where), where, unapplied(values))


@dataclass(frozen=True)
class Setting:
    value: object  # None: off
    source: str

    def as_dict(self) -> dict:
        return {"value": self.value, "source": self.source}


FIELDS = ("temperature", "top_k", "top_p", "repetition_penalty")


def resolve(given: Mapping[str, tuple[object, str]], defaults: GenerationDefaults) -> dict[str, Setting]:
    """The target's effective sampling values. ``given``: field -> (value, where it came from) for
    each value the user gave. temperature 0 is greedy; top_k, top_p, repetition_penalty None: off."""
    file = defaults.values
    out: dict[str, Setting] = {}

    def from_file(key: str) -> Setting:
        if key in file:
            return Setting(file[key], defaults.where)
        return Setting(HF_DEFAULTS[key], HF_DEFAULT)

    if "temperature" in given:
        out["temperature"] = Setting(*given["temperature"])
    elif defaults.mode == "none":
        out["temperature"] = Setting(0.0, SPECD_DEFAULT)
    else:
        sample = from_file("do_sample")
        why = f"{sample.source}: do_sample false" if "do_sample" in file else f"{HF_DEFAULT}: do_sample false"
        out["temperature"] = from_file("temperature") if sample.value else Setting(0.0, why)
    sampling = out["temperature"].value != 0
    for key, off in (("top_k", 0), ("top_p", 1.0), ("repetition_penalty", 1.0)):
        if key in given:
            setting = Setting(*given[key])
        elif defaults.mode == "none" or (key != "repetition_penalty" and not sampling):
            setting = Setting(None, SPECD_DEFAULT if defaults.mode == "none" else "not used when greedy")
        else:
            setting = from_file(key)
        out[key] = Setting(None if setting.value == off else setting.value, setting.source)
    for key, value in defaults.unapplied.items():
        if sampling or not UNAPPLIED[key][1]:
            raise UsageError(
                f"{defaults.where}: generate() would apply {key} = {shown(value)}, which specd does not implement, so "
                "the output would not have generate()'s distribution; remove the key from the file or pass "
                "--generation-config none"
            )
    return out


def resolve_draft(given: Mapping[str, tuple[object, str]], target: Mapping[str, Setting]) -> dict[str, Setting]:
    """The draft's: its own flags, else the target's effective values (the draft has no penalty)."""
    out = {}
    for key in ("temperature", "top_k", "top_p"):
        if key in given:
            value, source = given[key]
            out[key] = Setting(None if key == "top_k" and value == 0 else value, source)
        else:
            out[key] = Setting(target[key].value, "as the target")
    return out
