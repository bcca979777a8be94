"""``python -m specd.cli``: the same entry point as the ``specd`` console script."""

from specd.cli import main

main()
