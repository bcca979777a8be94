"""The options of a generation run, typed once and validated once.

``GenerateOptions`` is what ``generate``, ``trace run`` and ``sweep-k --measure``
build from their flags and the YAML config (``from_sources``); every value is
checked when the object is built, for type and range, with a message naming
where the value came from (the flag, or the config file and key). Nothing
downstream re-validates.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields

from specd.core.layouts import LAYOUTS
from specd.core.probability import BACKENDS
from specd.core.processors import check_penalty, check_temperature, check_top_k, check_top_p
from specd.errors import UsageError
from specd.models.drafts import parse_draft
from specd.models.generation_config import check_mode

MAX_K = 64  # drafts per round; past this a draft is never the bottleneck worth widening
BATCH_SIZE_CPU, BATCH_SIZE_CUDA = 64, 128  # requests decoding together when the user does not say
DTYPE_NAMES = ("float32", "bfloat16", "float16")

FLAGS = {
    "target": "--target",
    "draft": "--draft",
    "target_gguf": "--target-gguf",
    "draft_gguf": "--draft-gguf",
    "k": "-k",
    "k_max": "--k-max",
    "draft_stop": "--draft-stop",
    "k_schedule": "--k-schedule",
    "max_new_tokens": "--max-new-tokens",
    "temperature": "--temperature",
    "generation_config": "--generation-config",
    "top_k": "--top-k",
    "top_p": "--top-p",
    "repetition_penalty": "--repetition-penalty",
    "draft_temperature": "--draft-temperature",
    "draft_top_k": "--draft-top-k",
    "draft_top_p": "--draft-top-p",
    "seed": "--seed",
    "layout": "--layout",
    "backend": "--backend",
    "device": "--device",
    "dtype": "--dtype",
    "chat": "--chat",
    "stop": "--stop",
    "trust_remote_code": "--trust-remote-code",
    "device_map": "--device-map",
    "max_memory": "--max-memory",
}

# The type each field takes (for values that arrive untyped, from YAML).
_KINDS = {
    "target": "str?",
    "draft": "str?",
    "target_gguf": "str?",
    "draft_gguf": "str?",
    "k": "k",
    "k_max": "int",
    "draft_stop": "float",
    "k_schedule": "str?",
    "max_new_tokens": "int",
    "temperature": "float?",
    "generation_config": "str",
    "top_k": "int?",
    "top_p": "float?",
    "repetition_penalty": "float?",
    "draft_temperature": "float?",
    "draft_top_k": "int?",
    "draft_top_p": "float?",
    "seed": "int",
    "layout": "str",
    "backend": "str",
    "device": "str",
    "dtype": "str",
    "chat": "bool?",
    "stop": "strs",
    "trust_remote_code": "bool",
    "device_map": "str?",
    "max_memory": "str?",
}


@dataclass(frozen=True)
class GenerateOptions:
    target: str | None = None
    draft: str | None = None
    target_gguf: str | None = None
    draft_gguf: str | None = None
    k: int | str = "auto"  # drafts per round, or "auto": chosen per request and round (specd.policy.autok)
    k_max: int = 8  # the largest K auto may choose
    draft_stop: float = 0.0  # stop drafting where the draft's largest probability is below this (0: never)
    k_schedule: str | None = None  # a file whose recorded K schedules are replayed
    max_new_tokens: int = 128
    temperature: float | None = None  # None: from the generation config (auto) or greedy (none)
    generation_config: str = "auto"  # auto: unset sampling values as Hugging Face resolves them; none: ignore
    top_k: int | None = None
    top_p: float | None = None
    repetition_penalty: float | None = None
    draft_temperature: float | None = None  # default: the target's
    draft_top_k: int | None = None
    draft_top_p: float | None = None
    seed: int = 0
    layout: str = "replay_frontier"
    backend: str = "max_shift"
    device: str = "auto"
    dtype: str = "float32"
    chat: bool | None = None  # None: on for the embedded instruct default, off otherwise
    stop: tuple[str, ...] = ()
    trust_remote_code: bool = False  # run Python code shipped in a model folder (never by default)
    device_map: str | None = None  # "auto": spread a model too big for one device (accelerate)
    max_memory: str | None = None  # with device_map: "cpu=30GiB,0=70GiB", the most each device may hold
    # Where each value came from, for messages: field -> "flag" | "<config path>" (absent: default).
    sources: Mapping[str, str] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        for name, kind in _KINDS.items():
            object.__setattr__(self, name, self._typed(name, kind, getattr(self, name)))
        if self.temperature is not None:
            check_temperature(self.temperature, self.where("temperature"))
        check_mode(self.generation_config, self.where("generation_config"))
        if self.draft_temperature is not None:
            check_temperature(self.draft_temperature, self.where("draft_temperature"))
        for name in ("top_k", "draft_top_k"):
            check_top_k(getattr(self, name), self.where(name))
        for name in ("top_p", "draft_top_p"):
            check_top_p(getattr(self, name), self.where(name))
        check_penalty(self.repetition_penalty, self.where("repetition_penalty"))
        if self.k != "auto" and not 1 <= self.k <= MAX_K:
            raise UsageError(f"{self.where('k')} must be auto or in 1..{MAX_K}, got {self.k}")
        if not 1 <= self.k_max <= MAX_K:
            raise UsageError(f"{self.where('k_max')} must be in 1..{MAX_K}, got {self.k_max}")
        if not 0.0 <= self.draft_stop < 1.0:
            raise UsageError(f"{self.where('draft_stop')} must be in [0, 1), got {self.draft_stop}")
        if self.max_new_tokens < 1:
            raise UsageError(f"{self.where('max_new_tokens')} must be >= 1, got {self.max_new_tokens}")
        for name, choices in (("layout", tuple(LAYOUTS)), ("backend", BACKENDS), ("dtype", DTYPE_NAMES)):
            if getattr(self, name) not in choices:
                value = getattr(self, name)
                raise UsageError(f"{self.where(name)}: unknown {name} {value!r}; choose one of {', '.join(choices)}")
        for model, gguf in (("target", "target_gguf"), ("draft", "draft_gguf")):
            if getattr(self, model) and getattr(self, gguf):
                raise UsageError(f"give {FLAGS[model]} or {FLAGS[gguf]}, not both")
        if self.draft_gguf and not (self.target or self.target_gguf):
            raise UsageError("--draft-gguf needs a --target or --target-gguf (the embedded default has its own draft)")
        if any(not s for s in self.stop):
            raise UsageError(f"{self.where('stop')}: a stop string must not be empty")
        if self.device_map not in (None, "auto"):
            raise UsageError(f"{self.where('device_map')} takes auto, got {self.device_map!r}")
        if self.max_memory is not None and self.device_map is None:
            raise UsageError("--max-memory needs --device-map auto")
        if self.max_memory is not None:
            parse_max_memory(self.max_memory, self.where("max_memory"))
        spec = parse_draft(self.draft)
        if self.device_map and spec is not None and spec.kind in ("self-dtype", "self-layers"):
            raise UsageError(
                f"--draft {self.draft} is built from the target, which --device-map spreads over devices "
                "(accelerate's hooks own its forward); give a separate draft model or ngram:N"
            )

    def given(self, name: str) -> tuple[object, str] | None:
        """(value, where it came from) when the user set ``name`` (a flag or the config file), else None."""
        value = getattr(self, name)
        return None if value is None else (value, self.sources.get(name, "flag"))

    def where(self, name: str) -> str:
        """How to name a field in a message: its flag, or the config file and key it came from."""
        source = self.sources.get(name, "flag")
        return FLAGS[name] if source == "flag" else f"{source}: {name}"

    def _typed(self, name: str, kind: str, value):
        """Refuse a value of the wrong type (YAML can hold anything); ints are fine where floats are."""
        optional = kind.endswith("?")
        base = kind.rstrip("?")
        if value is None and optional:
            return None
        if base == "k":  # an integer or the word auto (a flag's text arrives as a string)
            if isinstance(value, str) and value.strip().lower() == "auto":
                return "auto"
            if isinstance(value, str) and value.strip().lstrip("+-").isdigit():
                return int(value)
            if isinstance(value, int) and not isinstance(value, bool):
                return value
            raise UsageError(f"{self.where(name)} must be auto or an integer, got {value!r}")
        ok = {
            "int": isinstance(value, int) and not isinstance(value, bool),
            "float": isinstance(value, (int, float)) and not isinstance(value, bool),
            "str": isinstance(value, str),
            "bool": isinstance(value, bool),
            "strs": isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value),
        }[base]
        if base == "strs" and isinstance(value, str):
            return (value,)
        if not ok:
            what = {"int": "an integer", "float": "a number", "str": "a string", "bool": "true or false"}.get(
                base, "a list of strings"
            )
            raise UsageError(f"{self.where(name)} must be {what}, got {value!r}")
        if base == "float":
            value = float(value)
            if not math.isfinite(value):
                raise UsageError(f"{self.where(name)} must be a finite number, got {value}")
        return tuple(value) if base == "strs" else value

    @property
    def auto_k(self) -> bool:
        return self.k == "auto"

    @property
    def uses_default_model(self) -> bool:
        return not (self.target or self.target_gguf)


def parse_max_memory(text: str, where: str = "--max-memory") -> dict:
    """'cpu=30GiB,0=70GiB' -> {"cpu": "30GiB", 0: "70GiB"} (device: cpu, disk or a GPU index)."""
    out: dict = {}
    for part in text.split(","):
        device, sep, size = part.strip().partition("=")
        if not sep or not size or not (device in ("cpu", "disk", "mps") or device.isdigit()):
            raise UsageError(f"{where} takes DEVICE=SIZE,... (cpu=30GiB,0=70GiB), got {text!r}")
        if not re.fullmatch(r"\d+(\.\d+)?\s*([KMGT]i?B)?", size.strip(), re.IGNORECASE):
            raise UsageError(f"{where}: {size!r} is not a size like 512MiB or 30GiB")
        out[int(device) if device.isdigit() else device] = size.strip()
    return out


OPTION_FIELDS = frozenset(f.name for f in fields(GenerateOptions) if f.name != "sources")


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
