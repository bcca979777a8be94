"""``sweep-k``: the speedup ledger as a table over K and batch size, analytic or measured on the
real models. The formula itself lives in ``specd.policy.ledger``."""
