"""A linear layer's product form on a CPU: both forms compute the product, the faster one is kept
per class once both were timed side by side, and nothing changes outside specd's own calls."""

import copy
import itertools

import pytest
import torch
import torch.nn.functional as F

from specd.core.engine import EngineConfig, SpeculativeEngine
from specd.core.processors import SamplingPolicy
from specd.core.proposer import ModelProposer
from specd.core.state import Request
from specd.models.hf.products import (
    MAX_ROWS,
    PLAIN,
    SAMPLES,
    TRANSPOSED,
    FormedForward,
    ProductForms,
    forms_of,
    transposed,
)
from tests.hf_helpers import tiny_llama


class Clock:
    """A clock that moves only when a product runs, by that form's seconds."""

    def __init__(self, plain_seconds: float, transposed_seconds: float):
        self.now = 0.0
        self.cost = {PLAIN: plain_seconds, TRANSPOSED: transposed_seconds}

    def __call__(self) -> float:
        return self.now

    def spend(self, form: str) -> None:
        self.now += self.cost[form]


def timed_forms(plain_seconds: float, transposed_seconds: float, monkeypatch) -> ProductForms:
    """ProductForms whose products take the given seconds on its clock."""
    clock = Clock(plain_seconds, transposed_seconds)
    forms = ProductForms(clock=clock)
    from specd.models.hf import products

    for form, fn in list(products.FORMS.items()):

        def run(x, w, b, fn=fn, form=form):
            clock.spend(form)
            return fn(x, w, b)

        monkeypatch.setitem(products.FORMS, form, run)
    return forms


@pytest.mark.parametrize("rows", [1, 2, 3, 5, 17])
@pytest.mark.parametrize("bias", [False, True])
def test_the_transposed_form_is_the_same_product(rows, bias):
    torch.manual_seed(rows)
    x, w = torch.randn(rows, 48), torch.randn(80, 48)
    b = torch.randn(80) if bias else None
    out = transposed(x, w, b)
    assert out.shape == (rows, 80) and out.is_contiguous()
    torch.testing.assert_close(out, F.linear(x, w, b), rtol=1e-5, atol=1e-5)
    # float64: the same sums, so the two forms agree to float64 rounding
    torch.testing.assert_close(transposed(x.double(), w.double(), None), F.linear(x.double(), w.double()))


@pytest.mark.parametrize(
    ("plain_s", "transposed_s", "kept"), [(2.0, 1.0, TRANSPOSED), (1.0, 2.0, PLAIN), (1.0, 0.95, PLAIN)]
)
def test_each_class_keeps_the_form_timed_faster_by_the_margin(plain_s, transposed_s, kept, monkeypatch):
    forms = timed_forms(plain_s, transposed_s, monkeypatch)
    x, w = torch.randn(3, 16), torch.randn(24, 16)
    with forms.engaged():
        for _ in range(2 * SAMPLES):
            torch.testing.assert_close(forms.product(x, w, None), F.linear(x, w), rtol=1e-5, atol=1e-5)
    key = ((24, 16), torch.float32, 3, torch.get_num_threads())
    assert forms.chosen == {key: kept}  # decided after SAMPLES timings of each form, alternating
    assert not forms.timings
    # another row count, shape or dtype is another class, still undecided
    with forms.engaged():
        forms.product(torch.randn(4, 16), w, None)
        forms.product(x.double(), w.double(), None)
    assert len(forms.chosen) == 1 and len(forms.timings) == 2


def test_outside_specds_calls_and_past_max_rows_the_product_is_plain_and_untimed(monkeypatch):
    forms = timed_forms(2.0, 1.0, monkeypatch)
    x, w = torch.randn(2, 16), torch.randn(24, 16)
    assert torch.equal(forms.product(x, w, None), F.linear(x, w))  # not engaged
    with forms.engaged():
        big = torch.randn(MAX_ROWS + 1, 16)
        assert torch.equal(forms.product(big, w, None), F.linear(big, w))
    assert forms.clock() == 0.0 and not forms.timings and not forms.chosen


def test_installed_on_every_linear_of_a_model_shared_by_its_views_and_carried_by_a_deep_copy():
    model = tiny_llama(40, layers=2)
    x = torch.tensor([[1, 2, 3, 4]])
    with torch.no_grad():
        before = model(x).logits
    forms = forms_of(model)
    linears = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
    assert linears and all(isinstance(m.__dict__["forward"], FormedForward) for m in linears)
    assert forms_of(model) is forms  # installed once; a view sharing the modules finds the same
    with torch.no_grad():
        assert torch.equal(model(x).logits, before)  # Hugging Face's own calls: exactly as before
        with forms.engaged():
            for _ in range(2 * SAMPLES):
                torch.testing.assert_close(model(x).logits, before, rtol=1e-5, atol=1e-5)
    assert forms.chosen  # every class of the model's products decided in those calls
    twin = copy.deepcopy(model).to(torch.float64)
    twin_forms = forms_of(twin)
    assert twin_forms is not forms  # the copy's products are its own (another dtype, another class)
    twin_linears = [m for m in twin.modules() if isinstance(m, torch.nn.Linear)]
    assert all(m.__dict__["forward"].module is m for m in twin_linears)
    with torch.no_grad(), twin_forms.engaged():
        torch.testing.assert_close(twin(x).logits.float(), before, rtol=1e-4, atol=1e-4)


def test_a_module_whose_forward_something_else_replaced_is_left_alone():
    model = tiny_llama(40, layers=1)
    hooked = next(m for m in model.modules() if isinstance(m, torch.nn.Linear))
    hooked.forward = lambda x: F.linear(x, hooked.weight)  # e.g. accelerate's hooks
    forms_of(model)
    assert not isinstance(hooked.__dict__["forward"], FormedForward)
    others = [m for m in model.modules() if isinstance(m, torch.nn.Linear) and m is not hooked]
    assert all(isinstance(m.__dict__["forward"], FormedForward) for m in others)


def test_the_adapter_runs_its_calls_in_the_chosen_forms_and_gives_the_same_greedy_tokens(hf_pair):
    target, draft = hf_pair
    assert target.forms is not None and target.head.forms is target.forms
    greedy = SamplingPolicy.build(temperature=0)
    requests = [Request("a", (5, 6, 7, 8), 24), Request("b", (9, 10), 24)]
    expected = SpeculativeEngine.baseline(target, greedy).run(requests).new_tokens()
    for k in (1, 3):
        engine = SpeculativeEngine(target, ModelProposer(draft, greedy), greedy, EngineConfig(k=k))
        assert engine.run(requests).new_tokens() == expected
    rows = {key[2] for key in itertools.chain(target.forms.chosen, target.forms.timings)}
    assert {2, 4, 8} <= rows  # two requests' K = 0 steps and K = 1, K = 3 verify calls
    assert not target.forms.active  # engaged only inside the adapter's calls


def test_threads_deciding_one_class_at_once_never_lose_its_timings():
    """Issue 50: two threads timing one undecided class raced (the second found its timings deleted by
    the first: a KeyError). Many threads on many fresh classes: every product right, every class decided
    once, and whether products are engaged is each thread's own."""
    import threading

    forms = ProductForms()
    weights = [torch.randn(8 + i, 16) for i in range(6)]
    x = torch.randn(3, 16)
    errors, barrier = [], threading.Barrier(4)

    def work():
        try:
            barrier.wait()
            with forms.engaged():
                for _ in range(SAMPLES * 2 + 1):
                    for w in weights:
                        torch.testing.assert_close(forms.product(x, w, None), F.linear(x, w))
        except Exception as err:  # noqa: BLE001 - any failure in a thread is the test's
            errors.append(err)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    assert not forms.active  # engaged in the other threads, not in this one
    for t in threads:
        t.join()
    assert errors == [] and forms.timings == {} and len(forms.chosen) == len(weights)
    clone = copy.deepcopy(forms)  # a deep copy of a model carries its forms: its own lock, the same choices
    assert clone.chosen == forms.chosen and not clone.active


def test_a_class_decided_while_a_product_waited_for_the_lock_is_used_and_not_timed_again():
    """The race behind a flaky run of the test above: a product that found its class undecided, then
    waited for the lock while another thread decided it, must take the decision (it left a stray
    timing behind, never decided again)."""
    forms = ProductForms()
    x, w = torch.randn(3, 16), torch.randn(24, 16)
    key = ((24, 16), torch.float32, 3, torch.get_num_threads())

    class DecidedMeanwhile:  # the lock, taken just after another thread decided the class
        def __enter__(self):
            forms.chosen[key] = TRANSPOSED

        def __exit__(self, *exc):
            return None

    forms._lock = DecidedMeanwhile()
    with forms.engaged():
        torch.testing.assert_close(forms.product(x, w, None), F.linear(x, w), rtol=1e-5, atol=1e-5)
    assert forms.timings == {} and forms.chosen == {key: TRANSPOSED}
