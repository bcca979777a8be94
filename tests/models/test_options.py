"""Options typed once: every value checked when the object is built, named by where it came from."""

import math

import pytest

from specd.errors import UsageError
from specd.models.run.options import GenerateOptions, from_sources


@pytest.mark.parametrize(
    "config,message",
    [
        ({"k": "two"}, "run.yaml: k must be auto or an integer, got 'two'"),
        ({"k": 2.7}, "run.yaml: k must be auto or an integer, got 2.7"),
        ({"k": True}, "run.yaml: k must be auto or an integer"),
        ({"k": 0}, "run.yaml: k must be auto or in 1..64"),
        ({"temperature": [1]}, "run.yaml: temperature must be a number"),
        ({"temperature": math.nan}, "run.yaml: temperature must be a finite number"),
        ({"top_p": 1.5}, "run.yaml: top_p must be in (0, 1]"),
        ({"max_new_tokens": "10"}, "run.yaml: max_new_tokens must be an integer"),
        ({"chat": "yes"}, "run.yaml: chat must be true or false"),
        ({"stop": [1, 2]}, "run.yaml: stop must be a string or a list of strings"),
        ({"layout": "sideways"}, "run.yaml: layout: unknown layout 'sideways'"),
        ({"draft": "self:int3"}, "unknown draft source"),
    ],
)
def test_config_values_are_type_and_range_checked(config, message):
    with pytest.raises(UsageError) as err:
        from_sources({}, config, "run.yaml", set())
    assert message in str(err.value)


def test_flags_typed_on_the_command_line_win_over_the_file_which_wins_over_defaults():
    flags = {"k": 6, "max_new_tokens": 128, "temperature": 0.0}
    opts = from_sources(flags, {"k": 2, "max_new_tokens": 9, "stop": "END"}, "run.yaml", typed_on_command_line={"k"})
    assert (opts.k, opts.max_new_tokens, opts.temperature, opts.stop) == (6, 9, 0.0, ("END",))
    assert opts.where("k") == "-k" and opts.where("max_new_tokens") == "run.yaml: max_new_tokens"


@pytest.mark.parametrize(
    "kwargs,message",
    [
        ({"target": "a", "target_gguf": "b.gguf"}, "give --target or --target-gguf, not both"),
        ({"target": "a", "draft": "b", "draft_gguf": "c.gguf"}, "give --draft or --draft-gguf, not both"),
        ({"repetition_penalty": -1.0}, "--repetition-penalty must be a finite number > 0"),
        ({"draft_top_k": -1}, "--draft-top-k must be an integer >= 0 (0: off)"),
        ({"stop": ("",)}, "a stop string must not be empty"),
        ({"max_new_tokens": 0}, "--max-new-tokens must be >= 1"),
    ],
)
def test_flag_values_are_checked_once_when_the_options_are_built(kwargs, message):
    with pytest.raises(UsageError, match=message.replace("(", r"\(").replace(")", r"\)")):
        GenerateOptions(**kwargs)
