import inspect

from specd.models.hf import cache_compat
from tests.hf_helpers import tiny_gemma3, tiny_llama


def test_cache_argument_names_a_forward_parameter():
    model = tiny_llama(16)
    assert cache_compat.cache_argument(model) in inspect.signature(model.forward).parameters
    assert cache_compat.cache_argument(model.model) in inspect.signature(model.model.forward).parameters


def test_sliding_window_is_read_only_where_a_layer_slides():
    assert cache_compat.sliding_window(tiny_llama(16).config) is None
    assert cache_compat.sliding_window(tiny_gemma3(16, window=40).config) == 40
