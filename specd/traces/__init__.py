"""Acceptance logs: the versioned JSONL schema, writing, reading and summaries."""
