"""A Hugging Face causal LM's output head, run apart from its body (specd.models.hf.model): on a CPU in the
product form its model's ``ProductForms`` chose for the row count (specd.models.hf.products), and only
on the rows whose logits are needed."""

from __future__ import annotations

import torch

from specd.models.hf.products import ProductForms


class OutputHead:
    """The LM head, applied only to the rows whose logits are needed, in the product form its
    model's ``ProductForms`` chose for that row count (specd.models.hf.products; None: the plain
    linear, as on CUDA)."""

    def __init__(
        self,
        weight: torch.Tensor,
        bias: torch.Tensor | None,
        forms: ProductForms | None,
        softcap: float | None = None,
    ):
        """``softcap``: the model's final logit soft-capping c (logits = c tanh(x / c)), or None."""
        self.weight = weight
        self.bias = bias
        self.softcap = softcap
        self.forms = forms

    def restricted(self, columns: torch.Tensor) -> OutputHead:
        """The head over ``columns`` int64[N] only (a copy of those rows of the weight): its logits
        are the full head's at those columns."""
        bias = self.bias.detach()[columns].contiguous() if self.bias is not None else None
        return OutputHead(self.weight.detach()[columns].contiguous(), bias, self.forms, self.softcap)

    def __call__(self, hidden: torch.Tensor) -> torch.Tensor:
        """hidden float[..., n, D] -> logits float[..., n, V]."""
        product = torch.nn.functional.linear if self.forms is None else self.forms.product
        logits = product(hidden, self.weight, self.bias)
        if self.softcap:
            logits = torch.tanh(logits / self.softcap) * self.softcap
        return logits
