"""specd.models.hf.modes: a call's context leaves the owner's model as it found it, whatever the call does."""

import pytest
import torch

from specd.models.hf.modes import Modules, evaluating, own_call
from specd.models.hf.products import ProductForms


def modules_of(model: torch.nn.Module) -> tuple[torch.nn.Module, ...]:
    return tuple(model.modules())


@pytest.fixture(params=["tuple", "Modules"])
def taken(request):
    """How a call's context is given a model's modules: a tuple (read attribute by attribute), or
    ``Modules`` (the adapter's: their flags read from their instance dicts)."""
    return modules_of if request.param == "tuple" else Modules


def test_modules_read_the_flags_where_train_writes_them_and_not_where_a_module_keeps_its_own():
    model = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Dropout(0.5))
    taken = Modules(model)
    assert list(taken) == list(model.modules()) and taken.flags is not None
    model.train()
    assert all(flags["training"] for flags in taken.flags)

    class OwnFlag(torch.nn.Module):
        training = property(lambda self: True, lambda self, value: None)  # kept elsewhere than its dict

    odd = torch.nn.Sequential(torch.nn.Linear(2, 2), OwnFlag())
    assert Modules(odd).flags is None
    with evaluating(Modules(odd)):  # read attribute by attribute: it is found training, and set
        pass


def test_training_modules_are_in_eval_mode_inside_and_training_again_after_even_on_an_error(taken):
    model = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Dropout(0.5), torch.nn.Linear(2, 2))
    model.train()
    model[2].eval()  # the owner's mix: kept as it is
    before = [m.training for m in model.modules()]
    with evaluating(taken(model)):
        assert not any(m.training for m in model.modules())
    assert [m.training for m in model.modules()] == before
    with pytest.raises(RuntimeError), own_call(taken(model), ProductForms()):
        assert not any(m.training for m in model.modules())
        raise RuntimeError("the call failed")
    assert [m.training for m in model.modules()] == before


def test_one_context_entered_again_leaves_each_call_as_the_owner_left_the_model(taken):
    """The same context for several calls, the owner switching modes between them: after each call the
    model is in the owner's mode, never the one an earlier call found."""
    model = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Dropout(0.5))
    context = evaluating(taken(model))
    for mode in ("train", "eval", "eval", "train"):
        getattr(model, mode)()
        with context:
            assert not any(m.training for m in model.modules())
        assert all(m.training == (mode == "train") for m in model.modules())


def test_products_are_engaged_inside_a_call_only_and_a_nested_call_leaves_the_outer_engaged():
    model, forms = torch.nn.Linear(2, 2).eval(), ProductForms()
    assert not forms.active
    with own_call(modules_of(model), forms):
        assert forms.active
        with own_call(modules_of(model), forms):
            assert forms.active
        assert forms.active
    assert not forms.active
    with pytest.raises(ValueError), own_call(modules_of(model), forms):
        raise ValueError
    assert not forms.active
    with own_call(modules_of(model), None):  # a GPU's calls: no product forms
        assert not forms.active
