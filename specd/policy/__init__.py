"""How many drafts a request asks for, and why: the speedup ledger's formula (``ledger``,
``profile``) and the runtime K policies built on it (``kpolicy``: fixed and replayed K;
``autok``: -k auto from measured costs). Depends on ``specd.core`` only; ``sweeps``
lays the same formula out as a table."""
