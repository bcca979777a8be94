"""specd: exact speculative decoding, its oracle, and its cost ledger."""

__version__ = "0.1.0"
