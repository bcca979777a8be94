"""A generation run over either backend: its options (each declared once), the models it loads and
where, the pipeline from options to text, and what it returns and writes (results, manifest, --resume)."""
