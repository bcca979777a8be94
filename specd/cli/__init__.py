"""The ``specd`` command line: one module per command, errors mapped in ``main``."""
