"""A run's sampling policies from its options: the target's and the draft's, with every effective
value and where it came from (the user, the generation config, a default), and the target's further
controls (min-p, penalties, bans) as ``SamplingPolicy.build`` takes them."""

from __future__ import annotations

from specd.core.processors import SamplingPolicy
from specd.errors import UsageError, shown
from specd.models.admission import EventSpace
from specd.models.run.generation_config import FIELDS, GenerationDefaults, resolve, resolve_draft
from specd.models.run.options import GenerateOptions


def controls(opts: GenerateOptions, tokenizer, eos: frozenset[int]) -> dict:
    """The target's further sampling controls (min-p, presence and frequency penalties, no-repeat
    n-grams, bad words, min new tokens) as SamplingPolicy.build takes them. A bad word is banned
    as the tokenizer encodes it, alone and after a space; one that encodes to nothing is refused."""
    sequences = []
    for word in opts.bad_words:
        forms = {tuple(tokenizer(form, add_special_tokens=False).input_ids) for form in (word, " " + word) if form}
        forms.discard(())
        if not word or not forms:
            raise UsageError(f"--bad-words {shown(word)} encodes to no token; give a word the tokenizer can encode")
        sequences += sorted(forms)
    return {
        "min_p": opts.min_p,
        "presence_penalty": opts.presence_penalty,
        "frequency_penalty": opts.frequency_penalty,
        "no_repeat_ngram_size": opts.no_repeat_ngram_size,
        "bad_words_ids": tuple(sequences),
        "min_new_tokens": opts.min_new_tokens,
        "eos_ids": tuple(sorted(eos)),
    }


def policies(
    opts: GenerateOptions, space: EventSpace, generation: GenerationDefaults, extra: dict | None = None
) -> tuple[SamplingPolicy, SamplingPolicy, dict]:
    """The target's and the draft's sampling policies, and every effective value with its source
    (specd.models.run.generation_config: the user's values, else the generation config's, else defaults;
    the draft's default to the target's). ``extra``: the target's further controls (``controls``);
    the draft has none of them (as it has no repetition penalty): q stays the draft's own row."""
    mask = space.real_vocab if space.width > space.real_vocab else None
    given = {name: v for name in FIELDS if (v := opts.given(name)) is not None}
    target = resolve(given, generation)
    draft_given = {name: v for name in ("temperature", "top_k", "top_p") if (v := opts.given(f"draft_{name}"))}
    draft = resolve_draft(draft_given, target)
    values = {name: setting.value for name, setting in target.items()}
    target_policy = SamplingPolicy.build(**values, real_vocab=mask, **(extra or {}))
    draft_policy = SamplingPolicy.build(**{name: setting.value for name, setting in draft.items()}, real_vocab=mask)
    return target_policy, draft_policy, {"target": target, "draft": draft}
