"""The model-agnostic speculative round engine.

Terms, defined once for the whole package:

- p (p_i): the target's *processed* probability row at draft position i, i.e.
  softmax of the target's raw logits after the target policy's processors, at
  the logical prefix (committed output + d_<i). p_{K+1} scores the bonus.
- q (q_i): the draft's processed row that actually sampled d_i.
- accepted tokens: the prefix d_1..d_A that passed U_i < min(1, p_i(d_i)/q_i(d_i)).
- correction token: drawn from normalize([p_{A+1} - q_{A+1}]_+) at the first rejection.
- bonus token: drawn from p_{K+1} when all K drafts are accepted.
- terminal token: the correction or the bonus (exactly one per unstopped round).
- mean accepted length: emitted tokens per round, *counting* the terminal token
  (E[G] = E[A] + 1 without stops).
"""
