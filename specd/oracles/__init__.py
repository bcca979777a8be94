"""The exactness oracle, all driving the production engine on TableModel fixtures, in three parts:
``engine`` judges specd's own engine (exact enumeration, Monte Carlo, rationals, the invariant and
block proofs, the tree checks); ``samplers`` judges another engine's sampler, chain or tree, through
a protocol (in a sandbox, over tables and sizes whose coverage is stated, priced where it is not
exact); ``lab`` holds known-wrong engines and samplers each check must catch. The root holds what
they share: the fixture, the rig, the check's record, the oracle's own rule (``reference``), the
processes a run is spread over (``parallel``, ``lifeline``), and the report that assembles a run."""
