"""specd: exact speculative decoding, its oracle, and its cost ledger.

The public Python API is the names in ``PUBLIC`` (docs/python.md shows each in use), and the
pytest helper ``specd.testing.assert_sampler_exact``; every other module is private, and may
change with any release. Names load on first use, so ``import specd`` stays cheap.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

__version__ = "0.1.0"

# Every public name, and the module that defines it: the one list (tests/test_public_api.py holds
# each name's signature, so a refactor cannot change one silently).
PUBLIC = {
    "Pair": "specd.api.pair",
    "Generation": "specd.api.pair",
    "Comparison": "specd.api.pair",
    "Divergence": "specd.models.run.divergence",
    "RequestResult": "specd.models.run.generation",
    "TextDelta": "specd.models.run.generation",
    "prove": "specd.api.oracle",
    "check_sampler": "specd.api.oracle",
    "OracleReport": "specd.api.oracle",
    "CheckResult": "specd.api.oracle",
    "ledger": "specd.api.tables",
    "sweep": "specd.api.tables",
    "read_log": "specd.api.tables",
    "summarize_log": "specd.api.tables",
    "SpecdError": "specd.errors",
    "UsageError": "specd.errors",
}
__all__ = [*PUBLIC, "__version__"]

if TYPE_CHECKING:  # what type checkers see; at run time __getattr__ imports each on first use
    from specd.api.oracle import CheckResult as CheckResult
    from specd.api.oracle import OracleReport as OracleReport
    from specd.api.oracle import check_sampler as check_sampler
    from specd.api.oracle import prove as prove
    from specd.api.pair import Comparison as Comparison
    from specd.api.pair import Generation as Generation
    from specd.api.pair import Pair as Pair
    from specd.api.tables import ledger as ledger
    from specd.api.tables import read_log as read_log
    from specd.api.tables import summarize_log as summarize_log
    from specd.api.tables import sweep as sweep
    from specd.errors import SpecdError as SpecdError
    from specd.errors import UsageError as UsageError
    from specd.models.run.divergence import Divergence as Divergence
    from specd.models.run.generation import RequestResult as RequestResult
    from specd.models.run.generation import TextDelta as TextDelta


def __getattr__(name: str):
    if name in PUBLIC:
        value = getattr(importlib.import_module(PUBLIC[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'specd' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)
