"""specd's Python API: the public names are listed, once, in ``specd/__init__.py``."""
