"""The speedup ledger over K and batch size (see the sweep-k issue)."""
