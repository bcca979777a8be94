import torch

from specd.models import cache_compat
from tests.hf_helpers import tiny_llama


def filled_cache(batch=2, length=5):
    model = tiny_llama(32, seed=0)
    cache = cache_compat.new_dynamic_cache(model.config)
    ids = torch.arange(batch * length).reshape(batch, length) % 32
    with torch.no_grad():
        model(input_ids=ids, use_cache=True, **{cache_compat.cache_argument(model): cache})
    return model, cache


def test_reads_and_writes_every_layer():
    model, cache = filled_cache()
    kvs = cache_compat.get_kv(cache)
    assert len(kvs) == model.config.num_hidden_layers
    assert kvs[0][0].shape == (2, model.config.num_key_value_heads, 5, 16)
    assert cache.get_seq_length() == 5


def test_truncate_select_and_gather():
    _, cache = filled_cache()
    before = [(k.clone(), v.clone()) for k, v in cache_compat.get_kv(cache)]
    cache_compat.truncate(cache, 3)
    assert cache.get_seq_length() == 3
    assert torch.equal(cache_compat.get_kv(cache)[1][0], before[1][0][:, :, :3])
    cache_compat.select_batch(cache, torch.tensor([1]))
    assert torch.equal(cache_compat.get_kv(cache)[0][1], before[0][1][1:, :, :3])
    cache_compat.gather_positions(cache, torch.tensor([[2, 0]]))
    k = cache_compat.get_kv(cache)[0][0]
    assert torch.equal(k[0, :, 0], before[0][0][1, :, 2]) and torch.equal(k[0, :, 1], before[0][0][1, :, 0])


def test_cache_argument_names_a_forward_parameter():
    import inspect

    model = tiny_llama(16)
    assert cache_compat.cache_argument(model) in inspect.signature(model.forward).parameters
